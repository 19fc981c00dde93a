//! JSON has no NaN: serde_json writes a non-finite `f64` as `null`. These read `null` back as
//! NaN, so a report holding an undefined ratio or interval (a 0 ms step, a trace summary without
//! per-step samples) loads again, e.g. for `commgate comment --report`.

use serde::{Deserialize, Deserializer};

/// An `f64` that may have been written as `null`.
pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// An interval `[lo, hi]` whose ends may have been written as `null`.
pub fn pair<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    let [lo, hi] = <[Option<f64>; 2]>::deserialize(d)?;
    Ok([lo.unwrap_or(f64::NAN), hi.unwrap_or(f64::NAN)])
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Undefined {
        #[serde(deserialize_with = "super::f64")]
        ratio: f64,
        #[serde(deserialize_with = "super::pair")]
        ci: [f64; 2],
    }

    #[test]
    fn non_finite_values_survive_a_round_trip_as_nan() {
        let json = serde_json::to_string(&Undefined { ratio: f64::NAN, ci: [f64::NAN, 1.5] }).expect("json");
        assert_eq!(json, r#"{"ratio":null,"ci":[null,1.5]}"#);
        let back: Undefined = serde_json::from_str(&json).expect("reads back");
        assert!(back.ratio.is_nan() && back.ci[0].is_nan() && back.ci[1] == 1.5);
        assert!(serde_json::from_str::<Undefined>(r#"{"ratio":"x","ci":[1,2]}"#).is_err());
    }
}
