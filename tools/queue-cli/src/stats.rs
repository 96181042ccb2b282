//! Percentiles for the report.

use serde::Serialize;

/// Nearest-rank percentiles of a sample, in the sample's unit.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut sample: Vec<f64>) -> Percentiles {
        if sample.is_empty() {
            return Percentiles::default();
        }
        sample.sort_by(f64::total_cmp);
        let at = |p: f64| {
            let rank = ((p / 100.0) * sample.len() as f64).ceil() as usize;
            sample[rank.clamp(1, sample.len()) - 1]
        };
        Percentiles { count: sample.len(), p50: at(50.0), p90: at(90.0), p99: at(99.0), max: at(100.0) }
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 0 {
            return write!(f, "-");
        }
        write!(
            f,
            "p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}  (n={})",
            self.p50, self.p90, self.p99, self.max, self.count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max, p.count), (50.0, 90.0, 99.0, 100.0, 100));
        let one = Percentiles::of(vec![7.0]);
        assert_eq!((one.p50, one.max), (7.0, 7.0));
        assert_eq!(Percentiles::of(vec![]).count, 0);
    }
}
