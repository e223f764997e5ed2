//! The URL type every configured address is held in, and how sysport shows one: wherever a
//! configured URL is printed (`check-config`, the status page, `/status`, the log), it goes
//! through [`ShownUrl`], so a password in it is written `***`. Requests use the [`Url`] itself.

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
}
