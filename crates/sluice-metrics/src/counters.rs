//! Counters declared once: [`counters!`](crate::counters!) takes a list of counter fields,
//! each with its doc and, when it is exported, its Prometheus family (and
//! the label value that tells it apart within the family), and derives
//! everything else from that one list: the atomic struct the hot path adds
//! to, a plain copy of it (`totals()`), adding one copy into another
//! (lanes, workers), the `(name, value)` pairs a JSON summary is made of
//! (the field's name is its key), and the exported samples, each with its
//! help (the field's doc, or its family's when several fields share one)
//! and its type. [`encode`] writes any declared set's families. A new
//! counter is one line; it cannot be in the summary and missing from
//! `/metrics`, be named two ways, or have its help written twice.
//!
//! The hot path is what it was by hand: a `pub` `AtomicU64` per field,
//! added to with a relaxed `fetch_add` (measured: `sluice-bench` filter and
//! bridge rates unchanged, BENCHMARKS.md).

use crate::{counter, gauge};
use prometheus_client::encoding::DescriptorEncoder;

/// Where a counter goes in the exposition: its family, the label that
/// tells it apart from the family's other counters (none when the family
/// has one counter), the family's help and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    pub family: &'static str,
    pub label: Option<(&'static str, &'static str)>,
    /// The doc the help is taken from: the family's, else the field's
    /// ([`help`] makes the line of it).
    pub doc: &'static str,
    /// A gauge (`=> gauge "family"`), else a counter.
    pub gauge: bool,
}

/// Declares a counter set: `pub struct NAME / PLAIN { field, ... }`, or
/// `pub struct PLAIN { ... }` for a plain copy only (numbers gathered from
/// several owners when a summary or a scrape is made). A field may say
/// where it is exported: `field => "family"`, `field => gauge "family"`,
/// `field => "family" { "label" = "value" }`, and `/ N` after it exports
/// the count divided by N (milliseconds as seconds). A family that several
/// fields share takes its help from `families { /// help "family", ... }`
/// after the struct (checked when compiling); any other from its field's doc.
///
/// Generates `NAME` (an `AtomicU64` per field, `Default`), `PLAIN` (a `u64`
/// per field, `Copy`, serialized as a map), `NAME::totals`, `NAME::add` (a
/// plain copy's counts, skipping zeros), `PLAIN::add`, `PLAIN::pairs`
/// (`(name, value)`, in declaration order), `PLAIN::exported` (`(Export,
/// value)` of the fields that are exported), `PLAIN::NAMES` and
/// `PLAIN::FAMILIES` (each family once, in order).
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident / $plain:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident $( => $($gauge:ident)? $family:literal $( { $lk:literal = $lv:literal } )? $( / $div:literal )? )?
            ),* $(,)?
        }
        $( families { $( $(#[doc = $fdoc:literal])* $fname:literal ),* $(,)? } )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: ::std::sync::atomic::AtomicU64, )*
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

        $crate::counters! {
            #[doc = concat!("A plain copy of [`", stringify!($name), "`].")]
            $vis struct $plain {
                $(
                    $(#[doc = $doc])*
                    $field $( => $($gauge)? $family $( { $lk = $lv } )? $( / $div )? )?
                ),*
            }
            $( families { $( $(#[doc = $fdoc])* $fname ),* } )?
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $plain:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident $( => $($gauge:ident)? $family:literal $( { $lk:literal = $lv:literal } )? $( / $div:literal )? )?
            ),* $(,)?
        }
        $( families { $( $(#[doc = $fdoc:literal])* $fname:literal ),* $(,)? } )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        $vis struct $plain {
            $( $(#[doc = $doc])* pub $field: u64, )*
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

        // Every family has help of its own, and one type.
        const _: () = $crate::counters::check(
            &[ $( $( ($family, $crate::counters::is_gauge(stringify!($($gauge)?)), <[&str]>::len(&[ $( $lk )? ]) > 0), )? )* ],
            &[ $( $( $fname ),* )? ],
        );

        impl $plain {
            /// Every counter's name (its JSON key), in declaration order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($field) ),* ];

            /// Each exported family once, in declaration order.
            pub const FAMILIES: &'static [&'static str] = &$crate::counters::dedup_families::<{
                [ $( $( $family, )? )* ].len()
            }>([ $( $( $family, )? )* ]);

            /// The help of the families several fields share.
            const FAMILY_DOCS: &'static [(&'static str, &'static str)] =
                &[ $( $( ($fname, concat!($( $fdoc, "\n", )*)) ),* )? ];

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
                let mut out = ::std::vec::Vec::new();
                $(
                    let doc: &'static str = concat!($( $doc, "\n", )*);
                    $(
                        out.push((
                            $crate::counters::Export {
                                family: $family,
                                label: $crate::counters::label(&[ $( ($lk, $lv) )? ]),
                                doc: $crate::counters::doc_of($family, Self::FAMILY_DOCS, doc),
                                gauge: $crate::counters::is_gauge(stringify!($($gauge)?)),
                            },
                            self.$field / $crate::counters::divisor(&[ $( $div )? ]),
                        ));
                    )?
                    let _ = doc;
                )*
                out
            }
        }
    };
}

/// The label of a field (at most one).
pub fn label(l: &[(&'static str, &'static str)]) -> Option<(&'static str, &'static str)> {
    l.first().copied()
}

/// What a field's counts are divided by when exported (`/ N`, else 1).
pub const fn divisor(d: &[u64]) -> u64 {
    match d {
        [n] => *n,
        _ => 1,
    }
}

/// `gauge` before a family makes it a gauge; any other word is refused
/// when compiling.
pub const fn is_gauge(marker: &str) -> bool {
    if const_eq(marker, "gauge") {
        return true;
    }
    assert!(marker.is_empty(), "counters!: the only word before a family is `gauge`");
    false
}

/// The doc a family's help comes from: its own when it has one, else its
/// field's.
pub fn doc_of(family: &str, family_docs: &[(&'static str, &'static str)], field: &'static str) -> &'static str {
    family_docs.iter().find(|(f, _)| *f == family).map_or(field, |(_, d)| d)
}

/// Refuses, when compiling, a set whose families are declared ambiguously:
/// a family that several fields share, or whose field is labelled, without
/// help of its own; one that is a gauge for one field and a counter for
/// another; help for a family no field goes to.
pub const fn check(fields: &[(&str, bool, bool)], family_docs: &[&str]) {
    let mut i = 0;
    while i < fields.len() {
        let (family, gauge, labelled) = fields[i];
        let mut shared = labelled;
        let mut j = 0;
        while j < fields.len() {
            if j != i && const_eq(fields[j].0, family) {
                shared = true;
                assert!(fields[j].1 == gauge, "counters!: a family is a gauge for one field, a counter for another");
            }
            j += 1;
        }
        if shared {
            assert!(contains(family_docs, family), "counters!: a family with labels needs help in `families {{ }}`");
        }
        i += 1;
    }
    let mut k = 0;
    while k < family_docs.len() {
        let mut used = false;
        let mut j = 0;
        while j < fields.len() {
            used |= const_eq(fields[j].0, family_docs[k]);
            j += 1;
        }
        assert!(used, "counters!: help in `families {{ }}` for a family no field goes to");
        k += 1;
    }
}

const fn contains(all: &[&str], s: &str) -> bool {
    let mut i = 0;
    while i < all.len() {
        if const_eq(all[i], s) {
            return true;
        }
        i += 1;
    }
    false
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

/// The `# HELP` line of a doc: its first paragraph on one line, without
/// the markdown of code and links.
pub fn help(doc: &str) -> String {
    let para: Vec<&str> = doc.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
    para.join(" ").replace("[`", "").replace("`]", "").replace('`', "")
}

/// A sample's labels.
pub type Labels = Vec<(&'static str, String)>;

/// A row of a declared set: the labels its samples carry (a port, a
/// queue), and its exported counters.
pub type Row = (Labels, Vec<(Export, u64)>);

/// The samples of `family` over rows of (labels, exported counters): each
/// row's labels, plus the counter's own label.
pub fn samples(family: &str, rows: &[Row]) -> Vec<(Labels, u64)> {
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

/// Every family of `rows` (declared sets' exported counters, of one set or
/// several that share families), in first-seen order, with its help, type
/// and samples.
pub fn encode(enc: &mut DescriptorEncoder, rows: &[Row]) -> Result<(), std::fmt::Error> {
    encode_where(enc, rows, |_| true)
}

/// [`encode`] of the families `keep` takes.
pub fn encode_where(
    enc: &mut DescriptorEncoder,
    rows: &[Row],
    keep: impl Fn(&str) -> bool,
) -> Result<(), std::fmt::Error> {
    let mut seen: Vec<Export> = Vec::new();
    for (e, _) in rows.iter().flat_map(|(_, ex)| ex) {
        if keep(e.family) && !seen.iter().any(|s| s.family == e.family) {
            seen.push(*e);
        }
    }
    for e in seen {
        let series = samples(e.family, rows);
        if e.gauge {
            let series: Vec<_> = series.into_iter().map(|(l, v)| (l, v as i64)).collect();
            gauge(enc, e.family, &help(e.doc), &series)?;
        } else {
            counter(enc, e.family, &help(e.doc), &series)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    crate::counters! {
        /// Test counters.
        pub struct Things / ThingTotals {
            /// Seen, on its own, with `code` and a [`Link`].
            ///
            /// Not the help.
            seen => "t_seen",
            /// Kept, one way.
            kept_a => "t_kept" { "how" = "a" },
            /// Kept, another.
            kept_b => "t_kept" { "how" = "b" },
            /// Only in the summary.
            quiet,
            /// Now, in ms.
            at_ms => gauge "t_at_seconds" / 1000,
        }
        families {
            /// Kept, by how,
            /// over two lines.
            "t_kept",
        }
    }

    crate::counters! {
        /// Plain only.
        pub struct Gathered {
            /// A gauge.
            level => gauge "t_level",
        }
    }

    #[test]
    fn one_declaration_gives_every_view() {
        let c = Things::default();
        c.add(&ThingTotals { seen: 3, kept_a: 1, kept_b: 0, quiet: 9, at_ms: 0 });
        c.add(&ThingTotals { seen: 1, at_ms: 5999, ..Default::default() });
        let t = c.totals();
        assert_eq!(t, ThingTotals { seen: 4, kept_a: 1, kept_b: 0, quiet: 9, at_ms: 5999 });
        let mut sum = t;
        sum.add(&t);
        assert_eq!(sum.seen, 8);
        assert_eq!(ThingTotals::NAMES, ["seen", "kept_a", "kept_b", "quiet", "at_ms"]);
        assert_eq!(t.pairs(), [("seen", 4), ("kept_a", 1), ("kept_b", 0), ("quiet", 9), ("at_ms", 5999)]);
        assert_eq!(super::families(ThingTotals::FAMILIES).collect::<Vec<_>>(), ["t_seen", "t_kept", "t_at_seconds"]);
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
        let mut g = Gathered { level: 1 };
        g.add(&Gathered { level: 1 });
        assert_eq!(g.pairs(), [("level", 2)]);
        assert_eq!(super::families(Gathered::FAMILIES).collect::<Vec<_>>(), ["t_level"]);
    }

    #[derive(Debug)]
    struct Exposed(Vec<super::Row>);

    impl prometheus_client::collector::Collector for Exposed {
        fn encode(&self, mut enc: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
            super::encode(&mut enc, &self.0)
        }
    }

    #[test]
    fn any_declared_set_is_encoded_with_its_help_and_type() {
        let t = ThingTotals { seen: 4, kept_a: 1, kept_b: 2, quiet: 9, at_ms: 5999 };
        let rows = vec![
            (vec![("port", "0".to_owned())], t.exported()),
            (vec![("port", "1".to_owned())], ThingTotals::default().exported()),
            (vec![], Gathered { level: 7 }.exported()),
        ];
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Exposed(rows)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let want = r#"# HELP t_seen Seen, on its own, with code and a Link.
# TYPE t_seen counter
t_seen_total{port="0"} 4
t_seen_total{port="1"} 0
# HELP t_kept Kept, by how, over two lines.
# TYPE t_kept counter
t_kept_total{port="0",how="a"} 1
t_kept_total{port="0",how="b"} 2
t_kept_total{port="1",how="a"} 0
t_kept_total{port="1",how="b"} 0
# HELP t_at_seconds Now, in ms.
# TYPE t_at_seconds gauge
t_at_seconds{port="0"} 5
t_at_seconds{port="1"} 0
# HELP t_level A gauge.
# TYPE t_level gauge
t_level{} 7
# EOF
"#;
        assert_eq!(text, want);
    }
}
