//! Time: real Unix time, and calendar arithmetic for billing periods ("one month from now"),
//! done on civil dates so Jan 31 + 1 month is Feb 28/29 as Stripe does it.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn real_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Billing interval of a recurring price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Day,
    Week,
    Month,
    Year,
}

impl Interval {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "day" => Some(Self::Day),
            "week" => Some(Self::Week),
            "month" => Some(Self::Month),
            "year" => Some(Self::Year),
            _ => None,
        }
    }
}

/// `ts` advanced by `count` intervals, keeping the time of day and clamping the day of month.
pub fn add_interval(ts: i64, interval: Interval, count: i64) -> i64 {
    match interval {
        Interval::Day => ts + 86_400 * count,
        Interval::Week => ts + 7 * 86_400 * count,
        Interval::Month | Interval::Year => {
            let months = if interval == Interval::Year { 12 * count } else { count };
            let days = ts.div_euclid(86_400);
            let secs = ts.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(days);
            let total = y * 12 + (m as i64 - 1) + months;
            let (ny, nm) = (total.div_euclid(12), (total.rem_euclid(12) + 1) as u32);
            let nd = d.min(days_in_month(ny, nm));
            days_from_civil(ny, nm, nd) * 86_400 + secs
        }
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's date algorithms.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `YYYY-MM-DD` for the HTML pages.
pub fn format_date(ts: i64) -> String {
    let (y, m, d) = civil_from_days(ts.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `15 Jan 2027`, as Stripe writes dates in proration descriptions.
pub fn format_day(ts: i64) -> String {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (y, m, d) = civil_from_days(ts.div_euclid(86_400));
    format!("{d} {} {y}", MONTHS[(m as usize).saturating_sub(1) % 12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_after_january_31st_is_the_end_of_february() {
        let jan31 = days_from_civil(2027, 1, 31) * 86_400 + 3600;
        let next = add_interval(jan31, Interval::Month, 1);
        assert_eq!(civil_from_days(next.div_euclid(86_400)), (2027, 2, 28));
        assert_eq!(next.rem_euclid(86_400), 3600);
        assert_eq!(format_date(add_interval(jan31, Interval::Year, 1)), "2028-01-31");
    }
}
