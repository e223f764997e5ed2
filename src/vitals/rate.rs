//! Prometheus' `rate()` over one series' readings, exactly as Prometheus computes it
//! (prometheus/prometheus `promql/functions.go`, `extrapolatedRate` with `isCounter` and
//! `isRate`): the increase between the first and the last reading in the range, every drop
//! counted as a counter reset (the value before the drop is added back), extrapolated towards
//! the range's ends when the readings come close enough to them, per second of the range.

/// One reading of a series: seconds on any clock, and the value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub t: f64,
    pub v: f64,
}

/// `rate(x[range])` evaluated at `end` over `points`, the series' readings in
/// `(end - range, end]` in time order. `None` with fewer than two readings (Prometheus
/// returns no sample then).
pub(crate) fn rate(points: &[Point], end: f64, range: f64) -> Option<f64> {
    let (first, last) = match points {
        [first, .., last] => (*first, *last),
        _ => return None,
    };
    if range <= 0.0 || last.t <= first.t {
        return None;
    }
    let mut increase = last.v - first.v;
    for pair in points.windows(2) {
        if pair[1].v < pair[0].v {
            increase += pair[0].v;
        }
    }
    let start = end - range;
    let mut to_start = first.t - start;
    let mut to_end = end - last.t;
    let sampled = last.t - first.t;
    let average = sampled / (points.len() - 1) as f64;
    // Close enough to a boundary (within 110% of the average spacing): extrapolate to it; else
    // the series starts or ends inside the range, half a spacing beyond its readings.
    let threshold = average * 1.1;
    if to_start >= threshold {
        to_start = average / 2.0;
    }
    // A counter cannot go below zero: never extrapolate back past the point where it was zero.
    if increase > 0.0 && first.v >= 0.0 {
        let to_zero = sampled * (first.v / increase);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = average / 2.0;
    }
    let factor = (sampled + to_start + to_end) / sampled / range;
    Some(increase * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(start: f64, step: f64, values: &[f64]) -> Vec<Point> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| Point {
                t: start + step * i as f64,
                v,
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn a_constant_rate_over_the_whole_range_is_that_rate() {
        // 12 readings 5 s apart ending at the evaluation time, +10 each: 2/s.
        let points = series(
            5.0,
            5.0,
            &(0..12).map(|i| 100.0 + 10.0 * i as f64).collect::<Vec<_>>(),
        );
        let r = rate(&points, 60.0, 60.0).expect("a rate");
        assert!(close(r, 2.0), "{r}");
    }

    #[test]
    fn fewer_than_two_readings_is_no_rate() {
        assert_eq!(rate(&[], 60.0, 60.0), None);
        assert_eq!(rate(&[Point { t: 10.0, v: 5.0 }], 60.0, 60.0), None);
    }

    #[test]
    fn a_reset_adds_back_the_value_before_the_drop() {
        // 100, 110, 120, then restarted: 5, 15, 25. Increase 20 + 5 + 20 = 45 over 25 s of
        // readings, spaced 5 s, touching both ends of a 30 s range: 45 * 30/25 / 30.
        let points = series(5.0, 5.0, &[100.0, 110.0, 120.0, 5.0, 15.0, 25.0]);
        let r = rate(&points, 30.0, 30.0).expect("a rate");
        assert!(close(r, 45.0 * (30.0 / 25.0) / 30.0), "{r}");
        // Without reset handling it would be negative.
        assert!(r > 0.0);
    }

    #[test]
    fn a_series_that_starts_inside_the_range_is_extrapolated_half_a_spacing() {
        // Readings from t=40 to t=60 every 5 s in a 60 s range: the gap to the start (40 s)
        // is beyond 1.1 spacings, so the start extends by 2.5 s only. Values start high, so
        // the zero point does not limit it.
        let points = series(40.0, 5.0, &[1000.0, 1010.0, 1020.0, 1030.0, 1040.0]);
        let r = rate(&points, 60.0, 60.0).expect("a rate");
        assert!(close(r, 40.0 * (20.0 + 2.5) / 20.0 / 60.0), "{r}");
    }

    #[test]
    fn extrapolation_stops_where_the_counter_was_zero() {
        // From 2 to 42 in 20 s (2/s): zero was 1 s before the first reading, closer than the
        // 5 s to the range's start.
        let points = series(5.0, 5.0, &[2.0, 12.0, 22.0, 32.0, 42.0]);
        let r = rate(&points, 25.0, 25.0).expect("a rate");
        assert!(close(r, 40.0 * (20.0 + 1.0 + 0.0) / 20.0 / 25.0), "{r}");
    }

    #[test]
    fn a_counter_that_never_moves_rates_zero() {
        let points = series(5.0, 5.0, &[7.0; 12]);
        assert_eq!(rate(&points, 60.0, 60.0), Some(0.0));
    }
}
