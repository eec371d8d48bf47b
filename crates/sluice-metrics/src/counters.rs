//! Counters declared once: [`counters!`] takes a list of counter fields,
//! each with its doc and, when it is exported, its Prometheus family (and
//! the label value that tells it apart within the family), and derives
//! everything else from that one list: the atomic struct the hot path adds
//! to, a plain copy of it (`totals()`), adding one copy into another
//! (lanes, workers), the `(name, value)` pairs a JSON summary is made of
//! (the field's name is its key), and the exported samples. A new counter
//! is one line; it cannot be in the summary and missing from `/metrics`,
//! or named two ways.
//!
//! The hot path is what it was by hand: a `pub` `AtomicU64` per field,
//! added to with a relaxed `fetch_add` (measured: `sluice-bench` filter and
//! bridge rates unchanged, BENCHMARKS.md).

/// Where a counter goes in the exposition: its family, and the label that
/// tells it apart from the family's other counters (none when the family
/// has one counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    pub family: &'static str,
    pub label: Option<(&'static str, &'static str)>,
}

/// Declares a counter set: `pub struct NAME / PLAIN { field, ... }`. A field
/// may say where it is exported: `field => "family"` or
/// `field => "family" { "label" = "value" }`.
///
/// Generates `NAME` (an `AtomicU64` per field, `Default`), `PLAIN` (a `u64`
/// per field, `Copy`, serialized as a map), `NAME::totals`, `NAME::add` (a plain copy's counts,
/// skipping zeros), `PLAIN::add`, `PLAIN::pairs` (`(name, value)`, in
/// declaration order), `PLAIN::exported` (`(Export, value)` of the fields
/// that are exported) and `PLAIN::FAMILIES` (each family once, in order).
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident / $plain:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident $( => $family:literal $( { $lk:literal = $lv:literal } )? )?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: ::std::sync::atomic::AtomicU64, )*
        }

        #[doc = concat!("A plain copy of [`", stringify!($name), "`].")]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $plain {
            $( $(#[doc = $doc])* pub $field: u64, )*
        }

        impl $name {
            /// The counters now.
            pub fn totals(&self) -> $plain {
                $plain { $( $field: self.$field.load(::std::sync::atomic::Ordering::Relaxed), )* }
            }

            /// Adds `t`'s counts (once per batch: zeros cost no atomic).
            pub fn add(&self, t: &$plain) {
                $(
                    if t.$field > 0 {
                        self.$field.fetch_add(t.$field, ::std::sync::atomic::Ordering::Relaxed);
                    }
                )*
            }
        }

        /// A map of every counter, by name, in declaration order (what
        /// `#[serde(flatten)]` puts in a JSON summary).
        impl $crate::__serde::Serialize for $plain {
            fn serialize<S: $crate::__serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                use $crate::__serde::ser::SerializeMap as _;
                let mut m = s.serialize_map(Some(Self::NAMES.len()))?;
                $( m.serialize_entry(stringify!($field), &self.$field)?; )*
                m.end()
            }
        }

        impl $plain {
            /// Every counter's name (its JSON key), in declaration order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($field) ),* ];

            /// Each exported family once, in declaration order.
            pub const FAMILIES: &'static [&'static str] = &$crate::counters::dedup_families::<{
                [ $( $( $family, )? )* ].len()
            }>([ $( $( $family, )? )* ]);

            /// Adds `o`'s counts.
            pub fn add(&mut self, o: &$plain) {
                $( self.$field += o.$field; )*
            }

            /// `(name, value)` of every counter, in declaration order.
            pub fn pairs(&self) -> ::std::vec::Vec<(&'static str, u64)> {
                ::std::vec![ $( (stringify!($field), self.$field) ),* ]
            }

            /// The exported counters with where they go.
            pub fn exported(&self) -> ::std::vec::Vec<($crate::counters::Export, u64)> {
                ::std::vec![
                    $(
                        $(
                            (
                                $crate::counters::Export {
                                    family: $family,
                                    label: $crate::counters::label(&[ $( ($lk, $lv) )? ]),
                                },
                                self.$field,
                            ),
                        )?
                    )*
                ]
            }
        }
    };
}

/// The label of a field (at most one).
pub fn label(l: &[(&'static str, &'static str)]) -> Option<(&'static str, &'static str)> {
    l.first().copied()
}

/// `families` with repeats taken out, in first-seen order; `N` is the
/// input's length (the output is padded with "" past the distinct ones,
/// which [`families`] leaves out).
pub const fn dedup_families<const N: usize>(families: [&'static str; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < N {
        let mut j = 0;
        let mut seen = false;
        while j < n {
            if const_eq(out[j], families[i]) {
                seen = true;
            }
            j += 1;
        }
        if !seen {
            out[n] = families[i];
            n += 1;
        }
        i += 1;
    }
    out
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The families of a `FAMILIES` constant (its padding left out).
pub fn families(all: &'static [&'static str]) -> impl Iterator<Item = &'static str> {
    all.iter().copied().filter(|f| !f.is_empty())
}

/// A sample's labels.
pub type Labels = Vec<(&'static str, String)>;

/// The samples of `family` over rows of (labels, exported counters): each
/// row's labels, plus the counter's own label.
pub fn samples(family: &str, rows: &[(Labels, Vec<(Export, u64)>)]) -> Vec<(Labels, u64)> {
    let mut out = Vec::new();
    for (labels, exported) in rows {
        for (e, v) in exported.iter().filter(|(e, _)| e.family == family) {
            let mut l = labels.clone();
            l.extend(e.label.map(|(k, v)| (k, v.to_owned())));
            out.push((l, *v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    crate::counters! {
        /// Test counters.
        pub struct Things / ThingTotals {
            /// Seen.
            seen => "t_seen",
            /// Kept, one way.
            kept_a => "t_kept" { "how" = "a" },
            /// Kept, another.
            kept_b => "t_kept" { "how" = "b" },
            /// Only in the summary.
            quiet,
        }
    }

    #[test]
    fn one_declaration_gives_every_view() {
        let c = Things::default();
        c.add(&ThingTotals { seen: 3, kept_a: 1, kept_b: 0, quiet: 9 });
        c.add(&ThingTotals { seen: 1, ..Default::default() });
        let t = c.totals();
        assert_eq!(t, ThingTotals { seen: 4, kept_a: 1, kept_b: 0, quiet: 9 });
        let mut sum = t;
        sum.add(&t);
        assert_eq!(sum.seen, 8);
        assert_eq!(ThingTotals::NAMES, ["seen", "kept_a", "kept_b", "quiet"]);
        assert_eq!(t.pairs(), [("seen", 4), ("kept_a", 1), ("kept_b", 0), ("quiet", 9)]);
        assert_eq!(super::families(ThingTotals::FAMILIES).collect::<Vec<_>>(), ["t_seen", "t_kept"]);
        let rows = vec![(vec![("port", "0".to_owned())], t.exported())];
        let kept = super::samples("t_kept", &rows);
        assert_eq!(
            kept,
            [
                (vec![("port", "0".to_owned()), ("how", "a".to_owned())], 1),
                (vec![("port", "0".to_owned()), ("how", "b".to_owned())], 0)
            ]
        );
        assert_eq!(super::samples("t_seen", &rows), [(vec![("port", "0".to_owned())], 4)]);
    }
}
