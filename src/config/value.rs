//! Parsing of config values: Kafka's plain numbers plus human-readable durations (`7d`, `30s`)
//! for `*.ms` settings and sizes (`1GiB`, `512MB`) for `*.bytes` settings.

/// The type of a config value, as DescribeConfigs reports it (`config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl Kind {
    /// Kafka's `DescribeConfigsResponse.ConfigType` code.
    pub fn describe_code(self) -> i8 {
        match self {
            Kind::Boolean => 1,
            Kind::String => 2,
            Kind::Int => 3,
            Kind::Short => 4,
            Kind::Long => 5,
            Kind::Double => 6,
            Kind::List => 7,
            Kind::Class => 8,
            Kind::Password => 9,
        }
    }
}

/// Why a value was refused; the caller adds the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("expected {expected}, got {got:?}")]
    Type { expected: &'static str, got: String },
    #[error("{got} is out of range: {range}")]
    Range { got: String, range: String },
    #[error("{got:?} is not one of {allowed}")]
    NotAllowed { got: String, allowed: String },
    /// A value whose form is wrong, with Kafka's words for the right one.
    #[error("{0}")]
    Format(String),
}

fn split_unit(s: &str) -> (&str, &str) {
    let idx = s
        .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '.'))
        .unwrap_or(s.len());
    (s[..idx].trim(), s[idx..].trim())
}

/// Parses a long, accepting a duration unit when `key` ends in `.ms` and a size unit when it
/// ends in `.bytes`.
pub fn parse_long(key: &str, raw: &str) -> Result<i64, ValueError> {
    let s = raw.trim();
    if let Ok(v) = s.parse::<i64>() {
        return Ok(v);
    }
    let err = || ValueError::Type {
        expected: "a long integer",
        got: raw.to_string(),
    };
    let (num, unit) = split_unit(s);
    let n: f64 = num.parse().map_err(|_| err())?;
    let mult: f64 = if key.ends_with(".ms") {
        match unit {
            "ms" => 1.0,
            "s" => 1e3,
            "m" | "min" => 60e3,
            "h" => 3600e3,
            "d" => 86400e3,
            "w" => 7.0 * 86400e3,
            _ => return Err(err()),
        }
    } else if key.ends_with(".bytes") || key.ends_with(".size") {
        match unit.to_ascii_lowercase().as_str() {
            "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            "kib" | "k" => 1024.0,
            "mib" | "m" => 1024.0 * 1024.0,
            "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
            "tib" | "t" => 1024f64.powi(4),
            _ => return Err(err()),
        }
    } else {
        return Err(err());
    };
    let v = n * mult;
    if !v.is_finite() || v.abs() > i64::MAX as f64 {
        return Err(err());
    }
    Ok(v.round() as i64)
}

pub fn parse_int(key: &str, raw: &str) -> Result<i32, ValueError> {
    let v = parse_long(key, raw).map_err(|_| ValueError::Type {
        expected: "an integer",
        got: raw.to_string(),
    })?;
    i32::try_from(v).map_err(|_| ValueError::Range {
        got: raw.to_string(),
        range: "a 32-bit integer".into(),
    })
}

pub fn parse_bool(raw: &str) -> Result<bool, ValueError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ValueError::Type {
            expected: "true or false",
            got: raw.to_string(),
        }),
    }
}

pub fn parse_double(raw: &str) -> Result<f64, ValueError> {
    raw.trim().parse().map_err(|_| ValueError::Type {
        expected: "a number",
        got: raw.to_string(),
    })
}

/// Checks a value against its kind without keeping the parsed result.
pub fn check(key: &str, kind: Kind, raw: &str) -> Result<(), ValueError> {
    match kind {
        Kind::Boolean => parse_bool(raw).map(drop),
        Kind::Int | Kind::Short => parse_int(key, raw).map(drop),
        Kind::Long => parse_long(key, raw).map(drop),
        Kind::Double => parse_double(raw).map(drop),
        Kind::String | Kind::List | Kind::Class | Kind::Password => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_are_human_readable() {
        assert_eq!(parse_long("retention.ms", "7d").unwrap(), 604_800_000);
        assert_eq!(parse_long("retention.ms", "1500").unwrap(), 1500);
        assert_eq!(parse_long("segment.bytes", "1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_long("segment.bytes", "512MB").unwrap(), 512_000_000);
        assert!(parse_long("num.partitions", "3d").is_err());
        assert!(parse_int("x.bytes", "8GiB").is_err());
        assert!(parse_bool("yes").is_err());
    }
}
