//! The test bed's one SVG writer: horizontal bars (a median per row with
//! min-max whiskers and, where the seed post has one, its figure as a red
//! tick), and log-log lines for the experiments that grow a size.

use std::fmt::Write as _;

/// Text made safe for SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One row of a bar chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub label: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The seed post's figure in the same unit, if it has one.
    pub seed: Option<f64>,
    /// The number printed beside the bar.
    pub value: String,
}

/// A horizontal bar chart of `bars`, labels right-aligned in `label_width`
/// pixels, `legend` under it.
pub fn bars(title: &str, label_width: f64, bars: &[Bar], legend: &str) -> String {
    let (left, width, row_h, top) = (label_width, 560.0, 22.0, 40.0);
    let max = bars.iter().flat_map(|b| [b.max, b.median].into_iter().chain(b.seed)).fold(1e-9, f64::max) * 1.05;
    let h = top + row_h * bars.len() as f64 + 50.0;
    let x = |v: f64| left + v.max(0.0) / max * width;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{h}" font-family="sans-serif" font-size="12">"#,
        left + width + 90.0
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for (i, b) in bars.iter().enumerate() {
        let y = top + row_h * i as f64;
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, left - 6.0, y + 14.0, esc(&b.label));
        let _ = writeln!(
            s,
            r##"<rect x="{left}" y="{}" width="{:.1}" height="{}" fill="#4a7ab5"/>"##,
            y + 3.0,
            x(b.median) - left,
            row_h - 6.0
        );
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{}" y2="{}" stroke="black"/>"#,
            x(b.min),
            x(b.max),
            y + row_h / 2.0,
            y + row_h / 2.0
        );
        if let Some(seed) = b.seed {
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" x2="{:.1}" y1="{}" y2="{}" stroke="#d9534f" stroke-width="3"/>"##,
                x(seed),
                x(seed),
                y + 1.0,
                y + row_h - 1.0
            );
        }
        let label_at = b.max.max(b.seed.unwrap_or(0.0));
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}">{}</text>"#, x(label_at) + 4.0, y + 14.0, esc(&b.value));
    }
    let foot = top + row_h * bars.len() as f64 + 20.0;
    let _ = writeln!(s, r#"<text x="10" y="{foot}">{}</text></svg>"#, esc(legend));
    s
}

/// One point of a line: x, and the median with its min-max whisker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub x: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One line of a log-log chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<Point>,
}

/// A log-log line chart (a tick per decade on y, each x labelled).
pub fn log_lines(title: &str, x_label: &str, y_label: &str, series: &[Series], legend: &str) -> String {
    let (left, top, w, h) = (80.0, 40.0, 600.0, 360.0);
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let lg = |v: f64| v.max(1e-3).log10();
    let xs: Vec<f64> = pts().map(|p| lg(p.x)).collect();
    let ys: Vec<f64> = pts().flat_map(|p| [lg(p.min), lg(p.max)]).collect();
    let (x0, x1) =
        (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let (y0, y1) = (
        ys.iter().copied().fold(f64::INFINITY, f64::min).floor(),
        ys.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil().max(1.0),
    );
    let (x1, y1) = (if x1 > x0 { x1 } else { x0 + 1.0 }, if y1 > y0 { y1 } else { y0 + 1.0 });
    let px = |lx: f64| left + (lx - x0) / (x1 - x0) * w;
    let py = |ly: f64| top + h - (ly - y0) / (y1 - y0) * h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">"#,
        left + w + 140.0,
        top + h + 70.0
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#,
        top + h,
        left + w,
        top + h,
        top + h
    );
    let mut d = y0;
    while d <= y1 + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            x2 = left + w,
            y = py(d),
            tx = left - 6.0,
            ty = py(d) + 4.0,
            label = 10f64.powf(d)
        );
        d += 1.0;
    }
    let mut ticks: Vec<f64> = pts().map(|p| p.x).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for t in ticks {
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}" text-anchor="middle">{t}</text>"#, px(lg(t)), top + h + 18.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        left + w / 2.0,
        top + h + 40.0,
        esc(x_label),
        top + h / 2.0,
        top + h / 2.0,
        esc(y_label)
    );
    for (i, line) in series.iter().filter(|l| !l.points.is_empty()).enumerate() {
        let color = line.color;
        let path: Vec<String> =
            line.points.iter().map(|p| format!("{:.1},{:.1}", px(lg(p.x)), py(lg(p.median)))).collect();
        let _ = writeln!(s, r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#, path.join(" "));
        for p in &line.points {
            let x = px(lg(p.x));
            let _ = writeln!(
                s,
                r#"<circle cx="{x:.1}" cy="{:.1}" r="3" fill="{color}"/><line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}"/>"#,
                py(lg(p.median)),
                py(lg(p.min)),
                py(lg(p.max))
            );
        }
        let ly = top + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            left + w + 10.0,
            left + w + 30.0,
            left + w + 34.0,
            ly + 4.0,
            esc(&line.name)
        );
    }
    let _ = writeln!(s, r#"<text x="10" y="{}">{}</text></svg>"#, top + h + 62.0, esc(legend));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn well_formed(svg: &str) -> bool {
        // Every element opened is closed or self-closed, and no raw `<` or `&` is left in text.
        let opened = svg.matches("<svg").count() == 1 && svg.trim_end().ends_with("</svg>");
        let text_ok = svg.split('>').all(|part| !part.split('<').next().unwrap_or("").contains('<'));
        opened && text_ok && !svg.contains("&<") && svg.matches("<text").count() == svg.matches("</text>").count()
    }

    #[test]
    fn bars_escape_labels_and_draw_one_row_each() {
        let b =
            |label: &str, seed| Bar { label: label.into(), median: 2.0, min: 1.0, max: 3.0, seed, value: "2".into() };
        let svg = bars("a <b> & c", 200.0, &[b("x<y", Some(4.0)), b("p&q", None)], "legend <1>");
        assert!(well_formed(&svg), "{svg}");
        assert!(svg.contains("x&lt;y") && svg.contains("p&amp;q") && svg.contains("a &lt;b&gt; &amp; c"));
        assert_eq!(svg.matches(r##"fill="#4a7ab5""##).count(), 2, "one bar per row");
        assert_eq!(svg.matches(r##"stroke="#d9534f""##).count(), 1, "a seed tick only where there is a figure");
    }

    #[test]
    fn log_lines_draw_each_series() {
        let p = |x| Point { x, median: x * 2.0, min: x, max: x * 3.0 };
        let series = vec![
            Series { name: "a<".into(), color: "#4a7ab5", points: vec![p(10.0), p(100.0)] },
            Series { name: "b".into(), color: "#d9534f", points: Vec::new() },
        ];
        let svg = log_lines("t", "flows (log)", "ns (log)", &series, "l");
        assert!(well_formed(&svg), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("a&lt;"));
    }
}
