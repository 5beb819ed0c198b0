//! Small charts drawn on the server as inline SVG: no script, no external file, readable with
//! styles off (every chart carries its figures as text beside it).

use std::fmt::Write as _;

use maud::{Markup, PreEscaped, html};

/// A series over a fixed span, e.g. the last 60 minutes.
pub struct Series {
    /// Already worded, e.g. "Requests per minute".
    pub title: String,
    /// Points as (position in the span, 0 = its start and `span` = now; value).
    pub points: Vec<(f64, f64)>,
    /// The span's length, in the positions' unit.
    pub span: f64,
    /// Says what an empty chart means, e.g. "No samples yet: servers write one a minute."
    pub empty: String,
}

const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 56.0;
const PAD: f64 = 2.0;

impl Series {
    fn max(&self) -> f64 {
        self.points.iter().map(|p| p.1).fold(0.0, f64::max)
    }

    fn last(&self) -> Option<f64> {
        self.points.last().map(|p| p.1)
    }
}

/// A figure: the title, the line (an area under it), and the latest and highest values in words.
pub fn sparkline(s: &Series) -> Markup {
    let max = s.max();
    let summary = match s.last() {
        Some(last) => format!("now {}, highest {}", figure(last), figure(max)),
        None => s.empty.clone(),
    };
    html! {
        figure.chart {
            figcaption {
                span.chart-title { (s.title) }
                " "
                span.chart-figures.muted { (summary) }
            }
            @if !s.points.is_empty() {
                svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT) role="img"
                    aria-label=(format!("{}: {}", s.title, summary)) {
                    title { (s.title) }
                    // The area and line: coordinates this module computes, numbers only.
                    (PreEscaped(paths(s, max)))
                }
            }
        }
    }
}

/// The area and line of `s`, scaled so `max` touches the top (a flat zero series lies on the
/// bottom edge).
fn paths(s: &Series, max: f64) -> String {
    let span = if s.span > 0.0 { s.span } else { 1.0 };
    let scale_y = if max > 0.0 { (HEIGHT - 2.0 * PAD) / max } else { 0.0 };
    let xy: Vec<(f64, f64)> = s
        .points
        .iter()
        .map(|(x, y)| {
            let x = PAD + (x.clamp(0.0, span) / span) * (WIDTH - 2.0 * PAD);
            let y = HEIGHT - PAD - y.max(0.0) * scale_y;
            (x, y)
        })
        .collect();
    let mut line = String::new();
    for (i, (x, y)) in xy.iter().enumerate() {
        let _ = write!(line, "{}{:.1},{:.1}", if i == 0 { "M" } else { " L" }, x, y);
    }
    let (first_x, last_x) = (xy.first().map(|p| p.0).unwrap_or(0.0), xy.last().map(|p| p.0).unwrap_or(0.0));
    let base = HEIGHT - PAD;
    let area = format!("{line} L{last_x:.1},{base:.1} L{first_x:.1},{base:.1} Z");
    let mut out = String::new();
    let _ = write!(out, r#"<path class="chart-area" d="{area}"/>"#);
    let _ = write!(out, r#"<path class="chart-line" d="{line}" fill="none"/>"#);
    if let Some((x, y)) = xy.last() {
        let _ = write!(out, r#"<circle class="chart-dot" cx="{x:.1}" cy="{y:.1}" r="2"/>"#);
    }
    out
}

/// A figure as people read it: whole numbers plain, others to one decimal.
fn figure(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 { format!("{}", v.round() as i64) } else { format!("{v:.1}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(f64, f64)>) -> Series {
        Series { title: "Queue <depth>".into(), points, span: 60.0, empty: "No samples yet.".into() }
    }

    #[test]
    fn a_series_is_drawn_across_the_span_with_its_highest_point_at_the_top() {
        let out = sparkline(&series(vec![(0.0, 0.0), (30.0, 10.0), (60.0, 5.0)])).into_string();
        assert!(out.contains(r#"d="M2.0,54.0 L120.0,2.0 L238.0,28.0""#), "{out}");
        assert!(out.contains("now 5, highest 10"), "{out}");
        assert!(out.contains(r#"<circle class="chart-dot" cx="238.0" cy="28.0""#), "{out}");
    }

    #[test]
    fn an_empty_series_says_why_and_draws_nothing() {
        let out = sparkline(&series(vec![])).into_string();
        assert!(out.contains("No samples yet."), "{out}");
        assert!(!out.contains("<svg"), "{out}");
    }

    #[test]
    fn a_flat_zero_series_lies_on_the_bottom_edge() {
        let out = sparkline(&series(vec![(10.0, 0.0), (20.0, 0.0)])).into_string();
        assert!(out.contains(r#"d="M41.3,54.0 L80.7,54.0""#), "{out}");
    }

    #[test]
    fn the_title_is_escaped() {
        let out = sparkline(&series(vec![(1.0, 1.5)])).into_string();
        assert!(out.contains("Queue &lt;depth&gt;"), "{out}");
        assert!(!out.contains("<depth>"), "{out}");
        assert!(out.contains("now 1.5"), "{out}");
    }
}
