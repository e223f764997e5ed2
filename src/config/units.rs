//! Durations (`250ms`, `1.5s`, `1m30s`) and byte sizes (`16MiB`), parsed and rendered so that
//! rendering then parsing gives back the same value.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parses a duration: one or more `NUMBER UNIT` terms (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`;
/// decimals allowed, as in `1.5s` or `1m30s`), or a bare number meaning seconds (`0`, `2`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let fail = || {
        format!("invalid duration {text:?}: expected a number and unit, like 250ms, 2s, 1.5s or 1m")
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(fail());
    }
    let mut nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit.trim() {
            // A bare number means seconds, but only on its own: `1m30` is a typo, not 1m30s.
            "" if rest.len() == s.len() && after.is_empty() => NANOS_PER_SEC,
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            _ => return Err(fail()),
        };
        let term = scaled(number, unit_nanos).ok_or_else(fail)?;
        nanos = nanos.checked_add(term).ok_or_else(fail)?;
        rest = after;
    }
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| fail())?;
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).expect("remainder of a division by 1e9");
    Ok(Duration::new(secs, subsec))
}

/// `number` (digits with at most one `.`) times `unit`, truncated to whole nanoseconds.
fn scaled(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') || fraction.len() > 18 {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut total = whole.checked_mul(unit)?;
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        total = total.checked_add(digits * unit / 10u128.pow(fraction.len() as u32))?;
    }
    Some(total)
}

/// Renders a duration in the largest of `s`, `ms`, `us`, `ns` that holds it exactly.
pub(crate) fn format_duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        format!("{}s", d.as_secs())
    } else if nanos % 1_000_000 == 0 {
        format!("{}ms", d.as_millis())
    } else if nanos % 1_000 == 0 {
        format!("{}us", d.as_micros())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

const BYTE_UNITS: [(&str, usize); 7] = [
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
];

/// Parses a byte size: a plain integer, or an integer with a unit (`512KiB`, `16MiB`, `1GiB`,
/// or decimal `KB`, `MB`, `GB`, or `B`), case-insensitive.
pub(crate) fn parse_bytes(text: &str) -> Result<usize, String> {
    let fail = || format!("invalid size {text:?}: expected bytes, like 1048576, 512KiB or 16MiB");
    let s = text.trim();
    let digits_len = s
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_len);
    let unit = unit.trim();
    let multiplier = if unit.is_empty() {
        1
    } else {
        BYTE_UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|&(_, size)| size)
            .ok_or_else(fail)?
    };
    parse_count(number)
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(fail)
}

/// Renders a byte size with the largest binary unit that holds it exactly (`16MiB`).
pub(crate) fn format_bytes(n: usize) -> String {
    for (name, size) in BYTE_UNITS.iter().take(3) {
        if n != 0 && n % size == 0 {
            return format!("{}{name}", n / size);
        }
    }
    n.to_string()
}

/// Parses a plain non-negative integer; `_` may separate digits (`250_000`).
pub(crate) fn parse_count(text: &str) -> Result<usize, String> {
    let s = text.trim();
    let fail = || format!("invalid number {text:?}: expected a whole number, like 250000");
    if s.is_empty() || s.starts_with('_') || !s.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(fail());
    }
    s.replace('_', "").parse().map_err(|_| fail())
}

/// Parses a TCP port.
pub(crate) fn parse_port(text: &str) -> Result<u16, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("invalid port {text:?}: must be 0-65535"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_units_decimals_compounds_and_bare_seconds() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("250ms", ms(250)),
            ("2s", ms(2000)),
            ("1.5s", ms(1500)),
            ("1m", ms(60_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("0s", ms(0)),
            ("0", ms(0)),
            ("5", ms(5000)),
            ("0.25", ms(250)),
            ("100us", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            (" 2s ", ms(2000)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn durations_reject_garbage() {
        for text in ["", "s", "2x", "-1s", "1.2.3s", "1m30", "abc", "1 s s", ".s"] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.starts_with("invalid duration"), "{err}");
        }
    }

    #[test]
    fn durations_render_exactly_and_round_trip() {
        for (d, text) in [
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::ZERO, "0s"),
            (Duration::from_micros(3), "3us"),
            (Duration::from_nanos(1_000_000_001), "1000000001ns"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn byte_sizes_accept_plain_integers_and_units() {
        for (text, want) in [
            ("16777216", 16 << 20),
            ("16MiB", 16 << 20),
            ("1MiB", 1 << 20),
            ("512KiB", 512 << 10),
            ("512 kib", 512 << 10),
            ("1GiB", 1 << 30),
            ("2KB", 2000),
            ("10B", 10),
            ("1_000", 1000),
        ] {
            assert_eq!(parse_bytes(text), Ok(want), "{text}");
        }
        for text in ["", "MiB", "1.5MiB", "-1", "16 MeB", "99999999999999999999"] {
            assert!(parse_bytes(text).is_err(), "{text}");
        }
        assert_eq!(format_bytes(16 << 20), "16MiB");
        assert_eq!(format_bytes(1536), "1536");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_bytes(2 << 30), "2GiB");
    }

    #[test]
    fn ports_are_0_to_65535() {
        assert_eq!(parse_port("8081"), Ok(8081));
        assert_eq!(parse_port("0"), Ok(0));
        assert_eq!(
            parse_port("99999"),
            Err(r#"invalid port "99999": must be 0-65535"#.to_owned())
        );
        assert!(parse_port("http").is_err());
    }
}
