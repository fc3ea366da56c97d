//! Number flags that say in words what they want. clap's own parsers answer a bad value in
//! Rust's terms (`invalid digit found in string`, `invalid float literal`); these answer
//! `expected a whole number of clients, e.g. 50`, in the flag's own terms.

/// A whole number (`usize`, `u64`, …) `what` (`"of clients"`, `"for the seed"`), e.g.
/// `example`.
pub fn whole<T: std::str::FromStr>(
    what: &'static str,
    example: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        s.trim().parse().map_err(|_| {
            let sign = if s.trim_start().starts_with('-') {
                " (not negative)"
            } else {
                ""
            };
            format!("expected a whole number{sign} {what}, e.g. {example}")
        })
    }
}

/// A finite number, not negative: `what` (`"a rate in requests per second"`), e.g. `example`.
pub fn amount(
    what: &'static str,
    example: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("expected {what}, e.g. {example}")),
    }
}

/// A share between 0 and 1, as a fraction (`0.05`) or a percentage (`5%`).
pub fn share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let x = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    };
    match x {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(
            "expected a share between 0 and 1, as a fraction or a percentage, e.g. 0.05 or 5%"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_say_what_they_count() {
        let clients = whole::<usize>("of clients", "50");
        assert_eq!(clients("64"), Ok(64));
        assert_eq!(
            clients("lots"),
            Err("expected a whole number of clients, e.g. 50".into())
        );
        assert_eq!(
            clients("2.5"),
            Err("expected a whole number of clients, e.g. 50".into())
        );
        assert!(clients("-3").unwrap_err().contains("not negative"));
    }

    #[test]
    fn amounts_are_finite_and_not_negative() {
        let rate = amount("a rate in requests per second", "2000");
        assert_eq!(
            rate("fast"),
            Err("expected a rate in requests per second, e.g. 2000".into())
        );
        assert_eq!(rate("2.5"), Ok(2.5));
        for bad in ["x", "-1", "inf", "NaN"] {
            assert!(rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shares_are_fractions_or_percentages() {
        assert_eq!(share("0.25"), Ok(0.25));
        assert_eq!(share("5%"), Ok(0.05));
        assert_eq!(share("100%"), Ok(1.0));
        for bad in ["1.5", "-0.1", "150%", "half"] {
            assert!(share(bad).is_err(), "{bad}");
        }
    }
}
