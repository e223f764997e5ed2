//! Durations (`250ms`, `1.5s`, `1m30s`) and byte sizes (`16MiB`), parsed and rendered so that
//! rendering then parsing gives back the same value.
//!
//! One rule for both: a number and its unit, always. A bare number is refused rather than
//! guessed (seconds? bytes?), and so are the decimal size units: Kubernetes reads `16M` as
//! 16,000,000 bytes where Prometheus reads `16MB` as 16 MiB, so sizes take the binary units
//! both agree on (`KiB`/`Ki`, `MiB`/`Mi`, `GiB`/`Gi`) or `B`.

use std::time::Duration;

/// `limits.max_label_value_bytes` when not set: the largest label value an upstream or the
/// configuration may carry.
pub(crate) const DEFAULT_MAX_LABEL_VALUE_BYTES: usize = 512 << 10;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A duration, size, count or port that does not read; shown after the value's location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnitError {
    #[error("invalid duration {0:?}: expected a number and unit, like 250ms, 2s, 1.5s, 1m or 0s")]
    Duration(String),
    #[error("invalid duration {text:?}: the number needs a unit, like {number}s or {number}ms")]
    DurationWithoutUnit { text: String, number: String },
    #[error("invalid size {0:?}: expected a whole number and unit, like 1048576B, 512KiB or 16MiB")]
    Size(String),
    #[error(
        "invalid size {text:?}: the number needs a unit, like {number}B, {number}KiB or \
         {number}MiB"
    )]
    SizeWithoutUnit { text: String, number: String },
    #[error(
        "invalid size {text:?}: decimal or binary? Kubernetes reads {short} as 10^{ten} bytes, \
         Prometheus reads {short}B as 2^{two}: write {number}{binary}, or {bytes}B"
    )]
    DecimalSize {
        text: String,
        number: String,
        short: &'static str,
        binary: &'static str,
        ten: u32,
        two: u32,
        bytes: usize,
    },
    #[error("invalid number {0:?}: expected a whole number, like 250000")]
    Count(String),
    #[error("invalid port {0:?}: must be 0-65535")]
    Port(String),
}

/// Parses a duration: one or more `NUMBER UNIT` terms (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`;
/// decimals allowed, as in `1.5s` or `1m30s`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let fail = || UnitError::Duration(text.to_owned());
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
            "" if !number.is_empty() => {
                return Err(UnitError::DurationWithoutUnit {
                    text: text.to_owned(),
                    number: number.to_owned(),
                });
            }
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

/// Size units as written (any case), largest first; each also without its `B`, as Kubernetes
/// writes them (`16Mi`).
const BYTE_UNITS: [(&str, usize); 4] = [
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("B", 1),
];

/// Decimal units, refused: (unit, the binary one, powers of ten and of two).
const DECIMAL_UNITS: [(&str, &str, u32, u32); 3] = [
    ("G", "GiB", 9, 30),
    ("M", "MiB", 6, 20),
    ("K", "KiB", 3, 10),
];

/// Parses a byte size: an integer and a binary unit, `B`, `KiB`, `MiB` or `GiB` (or
/// Kubernetes' `Ki`, `Mi`, `Gi`), in any case: `512KiB`, `16Mi`, `1048576B`.
pub(crate) fn parse_bytes(text: &str) -> Result<usize, UnitError> {
    let fail = || UnitError::Size(text.to_owned());
    let s = text.trim();
    let digits_len = s
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_len);
    let unit = unit.trim();
    let count = parse_count(number).map_err(|_| fail())?;
    if unit.is_empty() {
        return Err(UnitError::SizeWithoutUnit {
            text: text.to_owned(),
            number: number.to_owned(),
        });
    }
    let binary = BYTE_UNITS.iter().find(|(name, _)| {
        name.eq_ignore_ascii_case(unit)
            || name
                .strip_suffix('B')
                .is_some_and(|short| !short.is_empty() && short.eq_ignore_ascii_case(unit))
    });
    if let Some(&(_, size)) = binary {
        return count.checked_mul(size).ok_or_else(fail);
    }
    let decimal = DECIMAL_UNITS.iter().find(|(short, ..)| {
        unit.eq_ignore_ascii_case(short) || unit.eq_ignore_ascii_case(&format!("{short}B"))
    });
    match decimal {
        Some(&(short, binary, ten, two)) => Err(UnitError::DecimalSize {
            text: text.to_owned(),
            number: number.to_owned(),
            short,
            binary,
            ten,
            two,
            bytes: count.saturating_mul(10usize.pow(ten)),
        }),
        None => Err(fail()),
    }
}

/// Renders a byte size with the largest unit that holds it exactly (`16MiB`, `1536B`).
pub(crate) fn format_bytes(n: usize) -> String {
    let (name, size) = BYTE_UNITS
        .iter()
        .find(|&&(_, size)| n % size == 0 && n >= size)
        .copied()
        .unwrap_or(("B", 1));
    format!("{}{name}", n / size)
}

/// Parses a plain non-negative integer; `_` may separate digits (`250_000`).
pub(crate) fn parse_count(text: &str) -> Result<usize, UnitError> {
    let s = text.trim();
    let fail = || UnitError::Count(text.to_owned());
    if s.is_empty() || s.starts_with('_') || !s.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(fail());
    }
    s.replace('_', "").parse().map_err(|_| fail())
}

/// Parses a TCP port.
pub(crate) fn parse_port(text: &str) -> Result<u16, UnitError> {
    text.trim()
        .parse()
        .map_err(|_| UnitError::Port(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_units_decimals_and_compounds() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("250ms", ms(250)),
            ("2s", ms(2000)),
            ("1.5s", ms(1500)),
            ("1m", ms(60_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("0s", ms(0)),
            ("0.25s", ms(250)),
            ("100us", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            (" 2s ", ms(2000)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn durations_reject_garbage_and_bare_numbers() {
        for text in [
            "", "s", "2x", "-1s", "1.2.3s", "1m30", "abc", "1 s s", ".s", "0", "5", "0.25",
        ] {
            let err = parse_duration(text).expect_err(text).to_string();
            assert!(err.starts_with("invalid duration"), "{err}");
        }
        assert_eq!(
            parse_duration("5").map_err(|e| e.to_string()),
            Err(r#"invalid duration "5": the number needs a unit, like 5s or 5ms"#.to_owned())
        );
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
    fn byte_sizes_take_a_binary_unit_always() {
        for (text, want) in [
            ("16777216B", 16 << 20),
            ("16MiB", 16 << 20),
            ("16Mi", 16 << 20),
            ("1MiB", 1 << 20),
            ("512KiB", 512 << 10),
            ("512 kib", 512 << 10),
            ("512Ki", 512 << 10),
            ("1GiB", 1 << 30),
            ("1Gi", 1 << 30),
            ("10B", 10),
            ("1_000B", 1000),
        ] {
            assert_eq!(parse_bytes(text), Ok(want), "{text}");
        }
        for text in [
            "",
            "MiB",
            "1.5MiB",
            "-1",
            "16 MeB",
            "99999999999999999999B",
            "16µ",
            "16µB",
            "1000",
            "16M",
            "16MB",
            "2kb",
            "1G",
        ] {
            assert!(parse_bytes(text).is_err(), "{text}");
        }
        assert_eq!(
            parse_bytes("1000").map_err(|e| e.to_string()),
            Err(
                r#"invalid size "1000": the number needs a unit, like 1000B, 1000KiB or 1000MiB"#
                    .to_owned()
            )
        );
        assert_eq!(
            parse_bytes("16M").map_err(|e| e.to_string()),
            Err(
                "invalid size \"16M\": decimal or binary? Kubernetes reads M as 10^6 bytes, \
                 Prometheus reads MB as 2^20: write 16MiB, or 16000000B"
                    .to_owned()
            )
        );
        assert!(
            parse_bytes("16MB")
                .expect_err("MB")
                .to_string()
                .contains("write 16MiB, or 16000000B")
        );
    }

    #[test]
    fn byte_sizes_render_as_they_read_back() {
        for (n, text) in [
            (16 << 20, "16MiB"),
            (1536, "1536B"),
            (1000, "1000B"),
            (2 << 30, "2GiB"),
            (512 << 10, "512KiB"),
            ((1 << 20) + (1 << 10), "1025KiB"),
            (1, "1B"),
            (0, "0B"),
        ] {
            assert_eq!(format_bytes(n), text);
            assert_eq!(parse_bytes(text), Ok(n), "{text}");
        }
    }

    #[test]
    fn ports_are_0_to_65535() {
        assert_eq!(parse_port("8081"), Ok(8081));
        assert_eq!(parse_port("0"), Ok(0));
        assert_eq!(
            parse_port("99999").map_err(|e| e.to_string()),
            Err(r#"invalid port "99999": must be 0-65535"#.to_owned())
        );
        assert!(parse_port("http").is_err());
    }
}
