//! How the writers print numbers (SPEC §12): Nsight Compute's way, so a value reads the same in
//! our table and CSV as in `ncu`'s: whole numbers with thousands separators (`1,048,576`),
//! others with two decimals (`97.03`, `1,215,000,000.50`).

/// `v` as Nsight Compute prints a metric value (C locale grouping).
pub fn ncu_value(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "n/a".into()
        } else {
            format!("{v}")
        };
    }
    // Whole numbers up to 2^53 are exact in an f64; counters are whole numbers.
    if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        return group(&format!("{}", v.abs() as u64), v < 0.0, "");
    }
    let s = format!("{:.2}", v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, "00"));
    group(int, v < 0.0, &format!(".{frac}"))
}

fn group(digits: &str, negative: bool, tail: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + tail.len() + 1);
    if negative {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::ncu_value;

    #[test]
    fn whole_numbers_are_grouped_and_others_keep_two_decimals() {
        assert_eq!(ncu_value(0.0), "0");
        assert_eq!(ncu_value(999.0), "999");
        assert_eq!(ncu_value(2816.0), "2,816");
        assert_eq!(ncu_value(1_048_576.0), "1,048,576");
        assert_eq!(ncu_value(-1234.0), "-1,234");
        assert_eq!(ncu_value(97.031), "97.03");
        assert_eq!(ncu_value(1_215_000_000.5), "1,215,000,000.50");
        assert_eq!(ncu_value(0.126), "0.13");
        assert_eq!(ncu_value(f64::NAN), "n/a");
    }
}
