//! An upstream's last few minutes as an inline SVG: one column per second, a bar for the
//! slowest full-page scrape of that second, a line for the series kept, a red band for a
//! second with a failed scrape. Numbers only: nothing in it comes from an upstream's text.

use std::fmt::Write;

use super::history::{Point, WINDOW_SECONDS};

/// Height of the drawing, in SVG units (the width is one unit per second).
const HEIGHT: f64 = 60.0;
/// Room kept above the bars for the series line.
const BAR_TOP: f64 = 14.0;

/// What the legend says about the drawing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Scale {
    /// The slowest scrape drawn, in seconds.
    pub(super) max_duration: Option<f64>,
    /// The fewest and most series kept.
    pub(super) kept: Option<(u64, u64)>,
    /// Seconds with a failed scrape.
    pub(super) failed_seconds: usize,
}

/// Writes the `<svg>` for `points` (oldest first) into `out` and returns its scale.
pub(super) fn svg(points: &[Point], out: &mut String) -> Scale {
    let x = |p: &Point| (WINDOW_SECONDS as f64 - 1.0 - f64::from(p.seconds_ago)) + 0.5;
    let max_duration = points
        .iter()
        .filter_map(|p| p.max_duration_seconds)
        .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))));
    let kept = points.iter().filter_map(|p| p.kept).fold(None, |r, k| {
        Some(match r {
            None => (k, k),
            Some((lo, hi)) => (u64::min(lo, k), u64::max(hi, k)),
        })
    });
    let failed_seconds = points.iter().filter(|p| p.failures > 0).count();
    let _ = write!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {WINDOW_SECONDS} {HEIGHT}\" preserveAspectRatio=\"none\" \
         role=\"img\" aria-label=\"scrapes in the last {} minutes\">",
        WINDOW_SECONDS / 60
    );
    for quarter in 1..4 {
        let gx = WINDOW_SECONDS * quarter / 4;
        let _ = write!(out, "<path class=\"rule\" d=\"M{gx} 0V{HEIGHT}\"/>");
    }
    if failed_seconds > 0 {
        out.push_str("<path class=\"fail\" d=\"");
        for p in points.iter().filter(|p| p.failures > 0) {
            let _ = write!(out, "M{} 0V{HEIGHT}", x(p));
        }
        out.push_str("\"/>");
    }
    if let Some(max) = max_duration.filter(|&m| m > 0.0) {
        out.push_str("<path class=\"took\" d=\"");
        for p in points {
            if let Some(d) = p.max_duration_seconds {
                // At least one unit high: a scrape that took no time is still a scrape.
                let h = (d / max * (HEIGHT - BAR_TOP)).max(1.0);
                let _ = write!(out, "M{} {HEIGHT}V{:.1}", x(p), HEIGHT - h);
            }
        }
        out.push_str("\"/>");
    }
    if let Some((_, hi)) = kept.filter(|&(_, hi)| hi > 0) {
        out.push_str("<path class=\"kept\" d=\"");
        // A failure between two readings breaks the line: the series were gone meanwhile.
        let mut pen_down = false;
        for p in points {
            match p.kept {
                Some(k) => {
                    let y = HEIGHT - 2.0 - k as f64 / hi as f64 * (HEIGHT - 6.0);
                    let _ = write!(out, "{}{} {y:.1}", if pen_down { "L" } else { "M" }, x(p));
                    pen_down = true;
                }
                None if p.failures > 0 => pen_down = false,
                None => {}
            }
        }
        out.push_str("\"/>");
    }
    out.push_str("</svg>");
    Scale {
        max_duration,
        kept,
        failed_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(ago: u32, failures: u32, took: Option<f64>, kept: Option<u64>) -> Point {
        Point {
            seconds_ago: ago,
            scrapes: 1,
            failures,
            max_duration_seconds: took,
            kept,
        }
    }

    #[test]
    fn bars_scale_to_the_slowest_scrape_and_a_failure_breaks_the_line() {
        let points = [
            point(30, 0, Some(0.010), Some(100)),
            point(20, 1, Some(2.0), None),
            point(10, 0, Some(0.020), Some(100)),
            point(0, 0, Some(0.040), Some(50)),
        ];
        let mut out = String::new();
        let scale = svg(&points, &mut out);
        assert_eq!(scale.max_duration, Some(2.0));
        assert_eq!(scale.kept, Some((50, 100)));
        assert_eq!(scale.failed_seconds, 1);
        assert!(out.starts_with("<svg") && out.ends_with("</svg>"), "{out}");
        // The failed second, 20 s ago, is a full-height band.
        assert!(
            out.contains("<path class=\"fail\" d=\"M279.5 0V60\"/>"),
            "{out}"
        );
        // The slowest bar reaches the top of the bar area; the others are at least one unit.
        assert!(out.contains("M279.5 60V14.0"), "{out}");
        assert!(out.contains("M269.5 60V59.0"), "{out}");
        // Two segments: before the failure, and after it.
        let line = out.split("class=\"kept\" d=\"").nth(1).expect("a line");
        let line = &line[..line.find('"').expect("closed")];
        assert_eq!(line, "M269.5 4.0M289.5 4.0L299.5 31.0");
    }

    #[test]
    fn no_scrapes_draw_an_empty_chart() {
        let mut out = String::new();
        let scale = svg(&[], &mut out);
        assert_eq!(
            scale,
            Scale {
                max_duration: None,
                kept: None,
                failed_seconds: 0
            }
        );
        assert!(out.starts_with("<svg") && out.ends_with("</svg>"));
        assert!(!out.contains("class=\"took\"") && !out.contains("class=\"kept\""));
    }
}
