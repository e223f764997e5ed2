//! The URL type every configured address is held in, and how sysport shows one: wherever a
//! configured URL is printed (`check-config`, the status page, `/status`, the log), it goes
//! through [`ShownUrl`], so a password in it is written `***`; a configuration error quoting
//! text that does not parse as a URL hides it with [`hide_password_in`]. Requests use the
//! [`Url`] itself.

use std::borrow::Cow;
use std::fmt;

/// An absolute URL (upstream metrics, health and canary addresses).
pub use reqwest::Url;

/// What a password is shown as.
const HIDDEN: &str = "***";

/// `url` as sysport shows it: its password, if it has one, as `***`; the rest as it is.
#[derive(Debug, Clone, Copy)]
pub struct ShownUrl<'a>(pub &'a Url);

impl fmt::Display for ShownUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.password().is_none() {
            return f.write_str(self.0.as_str());
        }
        let mut url = self.0.clone();
        // Only a URL that cannot have a password refuses one, and this one has one.
        let _ = url.set_password(Some(HIDDEN));
        f.write_str(url.as_str())
    }
}

/// Text meant as a URL that may not parse as one (a configuration error quoting it): what
/// reads as its password, from the first `:` after the scheme's `//` to the last `@`, as `***`.
/// Too much may be hidden, never too little.
pub fn hide_password_in(text: &str) -> Cow<'_, str> {
    let start = text.find("://").map_or(0, |i| i + 3);
    let Some(at) = text.rfind('@').filter(|&at| at > start) else {
        return Cow::Borrowed(text);
    };
    match text[start..at].find(':') {
        Some(colon) => Cow::Owned(format!(
            "{}{HIDDEN}{}",
            &text[..start + colon + 1],
            &text[at..]
        )),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> String {
        ShownUrl(&Url::parse(text).expect("url")).to_string()
    }

    #[test]
    fn a_password_is_shown_as_stars_and_nothing_else_changes() {
        assert_eq!(
            shown("http://scraper:hunter2@127.0.0.1:8000/metrics?x=1"),
            "http://scraper:***@127.0.0.1:8000/metrics?x=1"
        );
        assert_eq!(
            shown("https://:token@engine/v1/models/%7Bmodel%7D"),
            "https://:***@engine/v1/models/%7Bmodel%7D"
        );
        for plain in [
            "http://127.0.0.1:8000/metrics",
            "http://scraper@127.0.0.1:8000/metrics",
        ] {
            assert_eq!(shown(plain), plain);
        }
    }

    #[test]
    fn a_password_in_text_that_is_no_url_is_hidden_too() {
        assert_eq!(
            hide_password_in("http://u:pa/ss#w@host:80x/metrics"),
            "http://u:***@host:80x/metrics"
        );
        assert_eq!(
            hide_password_in("vllm=http://u:s3cret@127.0.0.1:99999/metrics"),
            "vllm=http://u:***@127.0.0.1:99999/metrics"
        );
        assert_eq!(hide_password_in("u:s3cret@host"), "u:***@host");
        for kept in ["not a url", "http://u@host:x/", "ftp://host/"] {
            assert_eq!(hide_password_in(kept), kept);
        }
    }
}
