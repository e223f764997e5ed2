//! The two exposition formats: which one a body is, which one a Content-Type names, and the
//! content types sysport serves them under.

/// Content type of text format 0.0.4 as sysport serves it.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0 as sysport serves it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format of an upstream body, read from the body itself: OpenMetrics when it ends in
    /// `# EOF`, which every OpenMetrics document must, else text 0.0.4. The Content-Type is no
    /// guide: some engines serve OpenMetrics under either header, and a text page labelled
    /// OpenMetrics would lose every counter read as OpenMetrics.
    pub fn detect(body: &[u8]) -> Format {
        if ends_with_eof(body) {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The format a Content-Type names, if it names one.
    pub fn declared(content_type: &str) -> Option<Format> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            Some(Format::OpenMetrics)
        } else if media.eq_ignore_ascii_case("text/plain") {
            Some(Format::Text)
        } else {
            None
        }
    }
}

fn ends_with_eof(body: &[u8]) -> bool {
    let mut end = body.len();
    while end > 0 && matches!(body[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    let body = &body[..end];
    body.ends_with(b"# EOF") && (body.len() == 5 || body[body.len() - 6] == b'\n')
}
