//! Numbers printed as nccl-tests' C code prints them (`%*.2f` narrowing to
//! fit a column, `%e`, `%g`), so that the table matches its byte for byte,
//! and the `--compare` ratio in a column of the same kind.

/// Formats `value` in `width` characters as nccl-tests does: two decimals
/// while they fit, then one, then none, then an exponent.
pub fn fixed_width(value: f64, width: usize) -> String {
    let mut power = 0usize;
    let mut bound = 1.0f64;
    while value >= bound && power < 40 {
        power += 1;
        bound *= 10.0;
    }
    if power + 2 < width {
        format!("{value:>width$.2}")
    } else if power + 1 < width {
        format!("{value:>width$.1}")
    } else if power < width + 1 {
        format!("{value:>width$.0}")
    } else if width >= 7 {
        format!("{:>width$}", c_exponent(value, 1))
    } else {
        format!("{:>width$}", c_exponent(value, 0))
    }
}

/// `value` in C's `%.{precision}e` form (`1.2e+06`).
fn c_exponent(value: f64, precision: usize) -> String {
    let text = format!("{value:.precision$e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => text, // inf or NaN
    }
}

/// `value` in C's `%g` form: six significant digits, no trailing zeros,
/// an exponent below 1e-4 and from 1e6 on.
pub fn c_general(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    if !value.is_finite() {
        return if value.is_nan() {
            "nan"
        } else if value > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .to_string();
    }
    let scientific = format!("{value:.5e}");
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |text: &str| {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text.to_string()
        }
    };
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.abs())
    } else {
        let decimals = (5 - exponent).max(0) as usize;
        trim(&format!("{value:.decimals$}"))
    }
}

/// A ratio in the 6-character `ratio` column: three decimals below 10,
/// fewer above, `N/A` when there is none.
pub fn ratio_column(ratio: Option<f64>) -> String {
    match ratio {
        Some(value) if value.is_finite() && value >= 0.0 => {
            if value < 9.9995 {
                format!("{value:>6.3}")
            } else if value < 99.995 {
                format!("{value:>6.2}")
            } else if value < 999.95 {
                format!("{value:>6.1}")
            } else if value < 999_999.5 {
                format!("{value:>6.0}")
            } else {
                format!("{:>6}", c_exponent(value, 0))
            }
        }
        _ => format!("{:>6}", "N/A"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_columns() {
        assert_eq!(ratio_column(Some(1.0)), " 1.000");
        assert_eq!(ratio_column(Some(0.98765)), " 0.988");
        assert_eq!(ratio_column(Some(9.9994)), " 9.999");
        assert_eq!(ratio_column(Some(9.9996)), " 10.00");
        assert_eq!(ratio_column(Some(42.125)), " 42.12");
        assert_eq!(ratio_column(Some(123.45)), " 123.5");
        assert_eq!(ratio_column(Some(12345.0)), " 12345");
        assert_eq!(ratio_column(Some(2.5e6)), " 2e+06");
        assert_eq!(ratio_column(None), "   N/A");
        assert_eq!(ratio_column(Some(f64::INFINITY)), "   N/A");
        assert_eq!(ratio_column(Some(f64::NAN)), "   N/A");
        for value in [0.0, 0.5, 3.0, 77.7, 512.0, 99999.0, 1e9] {
            assert_eq!(ratio_column(Some(value)).len(), 6, "{value}");
        }
    }

    #[test]
    fn fixed_width_numbers() {
        assert_eq!(fixed_width(0.0, 6), "  0.00");
        assert_eq!(fixed_width(0.999, 6), "  1.00");
        assert_eq!(fixed_width(340.88, 6), "340.88");
        assert_eq!(fixed_width(4593.7, 6), "4593.7");
        assert_eq!(fixed_width(99999.4, 6), " 99999");
        assert_eq!(fixed_width(420937.0, 6), "420937");
        assert_eq!(fixed_width(1.0e6, 6), " 1e+06");
        assert_eq!(fixed_width(66.12, 7), "  66.12");
        assert_eq!(fixed_width(12345.6, 7), "12345.6");
        assert_eq!(fixed_width(1234567.0, 7), "1234567");
        assert_eq!(fixed_width(12345678.0, 7), "1.2e+07");
    }

    #[test]
    fn general_numbers() {
        assert_eq!(c_general(0.0), "0");
        assert_eq!(c_general(3.0), "3");
        assert_eq!(c_general(1234.5), "1234.5");
        assert_eq!(c_general(0.5), "0.5");
        assert_eq!(c_general(123456.0), "123456");
        assert_eq!(c_general(1234567.0), "1.23457e+06");
        assert_eq!(c_general(0.0001), "0.0001");
        assert_eq!(c_general(0.00001234), "1.234e-05");
        assert_eq!(c_general(2.0 / 3.0), "0.666667");
        assert_eq!(c_general(999999.5), "1e+06");
    }
}
