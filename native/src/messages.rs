//! Activity (message) events: checks 1 to 3 (docs/semantics/windows.md section 1) and the
//! activity flow's routing of a batch to its counter partitions.
//!
//! Check 3 goes field by field in the table's order (`workspace_id`, `channel_id`,
//! `user_id`, `ts`), each field completely (present, of its type, in its range) before
//! the next, so the first faulty field names the reason. `ts` has no upper bound: a
//! literal beyond 64 bits is valid and kept as written ([`Ts::Big`]).
//!
//! The routing ([`route`]) is what the counter stage needs of a batch: each valid event's
//! counter partition (`crc32(workspace) % P`, as Python's `zlib.crc32`), its source
//! batch's running greatest `ts` (`seen`), and the events on time within their batch (no
//! bucket before the window of their own `seen`) summed per bucket and `(workspace,
//! channel)` pair: one count per pair where there were many events.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use crate::json::Value;
use crate::score::{read_object, Refused, MISSING_FIELD, OUT_OF_RANGE, WRONG_TYPE};

/// Check 3's fields in the table's order.
pub const FIELDS: [&str; 4] = ["workspace_id", "channel_id", "user_id", "ts"];
pub const MAX_ID_CHARS: usize = 64;

/// An event time: a `u64`, or the literal of a greater one (digits, no leading zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ts<'a> {
    Small(u64),
    Big(&'a str),
}

impl Ord for Ts<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Ts::Small(a), Ts::Small(b)) => a.cmp(b),
            (Ts::Small(_), Ts::Big(_)) => Ordering::Less,
            (Ts::Big(_), Ts::Small(_)) => Ordering::Greater,
            (Ts::Big(a), Ts::Big(b)) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        }
    }
}

impl PartialOrd for Ts<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A valid event; ids borrowed from the input when they hold no escape.
#[derive(Debug, Clone, PartialEq)]
pub struct Message<'a> {
    pub workspace: Cow<'a, str>,
    pub channel: Cow<'a, str>,
    pub user: Cow<'a, str>,
    pub ts: Ts<'a>,
}

/// Checks 1 to 3 of one record.
pub fn check_message(raw: &[u8]) -> Result<Message<'_>, Refused> {
    let fields = read_object(raw, &FIELDS)?;
    let fail = |reason: &'static str, detail: String| Err(Refused { reason, detail });
    let mut ids: [Cow<'_, str>; 3] = Default::default();
    let mut ts = Ts::Small(0);
    for (i, (name, value)) in FIELDS.iter().zip(fields).enumerate() {
        match (i < 3, value) {
            (_, None) => return fail(MISSING_FIELD, format!("{name} is missing")),
            (true, Some(Value::Str(s))) => {
                if !(1..=MAX_ID_CHARS).contains(&s.chars().count()) {
                    return fail(OUT_OF_RANGE, format!("{name} must be 1 to {MAX_ID_CHARS} characters long"));
                }
                ids[i] = s;
            }
            (true, Some(_)) => return fail(WRONG_TYPE, format!("{name} must be a string")),
            (false, Some(Value::Int(literal))) => match time(literal) {
                Some(t) => ts = t,
                None => return fail(OUT_OF_RANGE, "ts must be >= 0".into()),
            },
            (false, Some(_)) => return fail(WRONG_TYPE, "ts must be an integer".into()),
        }
    }
    let [workspace, channel, user] = ids;
    Ok(Message { workspace, channel, user, ts })
}

/// An integer literal's time, None below zero (`-0` is zero).
fn time(literal: &str) -> Option<Ts<'_>> {
    if let Some(digits) = literal.strip_prefix('-') {
        return digits.bytes().all(|b| b == b'0').then_some(Ts::Small(0));
    }
    Some(literal.parse::<u64>().map_or(Ts::Big(literal), Ts::Small))
}

use crate::crc::crc32;

/// Per bucket, ascending, each pair's count, the pair named by the index of its first event.
pub type BucketSums = Vec<(u64, Vec<(usize, u64)>)>;

/// One counter partition's share of a batch.
#[derive(Debug, Default, PartialEq)]
pub struct PartPlan {
    /// Its events, as indexes into the batch's valid events, in input order.
    pub events: Vec<usize>,
    /// Where the routing sums and every `ts` and `seen` is within 64 bits: per bucket,
    /// ascending, each pair's count over the events on time within their batch.
    pub counts: Option<BucketSums>,
    /// With `counts`: the events that are not on time within their batch (a bucket before
    /// the window of their `seen`), in input order.
    pub late: Vec<usize>,
}

/// A batch routed to `P` counter partitions ([`route`]).
#[derive(Debug, PartialEq)]
pub struct Plan<'a> {
    /// Per valid event its batch's greatest `ts` up to and including it.
    pub seen: Vec<Ts<'a>>,
    pub parts: Vec<PartPlan>,
}

/// Whether bucket `b` is not before the window of `n` buckets ending at `seen`'s.
fn on_time(b: u64, seen: u64, bucket_ms: u64, n: u64) -> bool {
    u128::from(b) + u128::from(n) > u128::from(seen / bucket_ms)
}

/// Route a batch's valid events to `partitions` counter partitions. `sum`: sum each
/// partition's events on time within their batch per bucket and pair (mode `messages`
/// without a global summary), the others listed in `late`; a partition holding an event of
/// a `ts` beyond 64 bits, or after one in its batch, keeps its events one by one.
pub fn route<'a>(events: &[Message<'a>], partitions: usize, bucket_ms: u64, n: u64, sum: bool) -> Plan<'a> {
    let mut seen = Vec::with_capacity(events.len());
    let mut parts: Vec<PartPlan> = (0..partitions).map(|_| PartPlan::default()).collect();
    let mut running: Option<Ts<'a>> = None;
    let mut summable = vec![sum; partitions];
    let mut on_time_events: Vec<Vec<usize>> = vec![Vec::new(); partitions];
    for (i, event) in events.iter().enumerate() {
        let now = match running {
            Some(r) if r >= event.ts => r,
            _ => event.ts,
        };
        running = Some(now);
        seen.push(now);
        let p = crc32(event.workspace.as_bytes()) as usize % partitions;
        parts[p].events.push(i);
        if summable[p] {
            match (event.ts, now) {
                (Ts::Small(t), Ts::Small(seen)) if on_time(t / bucket_ms, seen, bucket_ms, n) => {
                    on_time_events[p].push(i)
                }
                (Ts::Small(_), Ts::Small(_)) => parts[p].late.push(i),
                _ => summable[p] = false, // beyond 64 bits, or after such a ts in its batch: one by one
            }
        }
    }
    for ((part, summable), mine) in parts.iter_mut().zip(summable).zip(on_time_events) {
        if summable && !part.events.is_empty() {
            part.counts = Some(sum_pairs(events, &mine, bucket_ms));
        } else {
            part.late = Vec::new();
        }
    }
    Plan { seen, parts }
}

fn sum_pairs(events: &[Message<'_>], mine: &[usize], bucket_ms: u64) -> BucketSums {
    let mut buckets: BucketSums = Vec::new();
    let mut at: HashMap<(u64, &str, &str), (usize, usize)> = HashMap::with_capacity(mine.len());
    for &i in mine {
        let event = &events[i];
        let Ts::Small(t) = event.ts else { unreachable!("summed partitions hold small times only") };
        let b = t / bucket_ms;
        match at.get(&(b, &*event.workspace, &*event.channel)) {
            Some(&(j, k)) => buckets[j].1[k].1 += 1,
            None => {
                let j = match buckets.iter().position(|(x, _)| *x == b) {
                    Some(j) => j,
                    None => {
                        buckets.push((b, Vec::new()));
                        buckets.len() - 1
                    }
                };
                buckets[j].1.push((i, 1));
                at.insert((b, &event.workspace, &event.channel), (j, buckets[j].1.len() - 1));
            }
        }
    }
    buckets.sort_by_key(|(b, _)| *b);
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::{INVALID_JSON, NOT_AN_OBJECT};

    const LINE: &str = r#"{"workspace_id":"w1","channel_id":"c1","user_id":"ana","ts":60000}"#;

    fn reason(raw: &str) -> &'static str {
        check_message(raw.as_bytes()).map(|_| "ok").unwrap_or_else(|r| r.reason)
    }

    fn msg(ws: &'static str, ch: &'static str, ts: u64) -> Message<'static> {
        Message { workspace: ws.into(), channel: ch.into(), user: "u".into(), ts: Ts::Small(ts) }
    }

    #[test]
    fn a_valid_line() {
        let m = check_message(LINE.as_bytes()).unwrap();
        assert_eq!((&*m.workspace, &*m.channel, &*m.user, m.ts), ("w1", "c1", "ana", Ts::Small(60000)));
        assert!(matches!(m.workspace, Cow::Borrowed(_)));
    }

    #[test]
    fn each_check_and_the_first_faulty_field() {
        assert_eq!(reason("{"), INVALID_JSON);
        assert_eq!(reason("[]"), NOT_AN_OBJECT);
        assert_eq!(reason("{}"), MISSING_FIELD);
        assert_eq!(check_message(b"{}").unwrap_err().detail, "workspace_id is missing");
        assert_eq!(reason(&LINE.replace("60000", "-1")), OUT_OF_RANGE);
        assert_eq!(reason(&LINE.replace("60000", "-0")), "ok");
        assert_eq!(reason(&LINE.replace("60000", "1.0")), WRONG_TYPE);
        assert_eq!(reason(&LINE.replace(r#""w1""#, r#""""#).replace("60000", "true")), OUT_OF_RANGE);
        assert_eq!(reason(&LINE.replace(r#""c1""#, "5").replace(r#""ts":60000"#, r#""x":1"#)), WRONG_TYPE);
        let big = LINE.replace("60000", "100000000000000000000");
        assert_eq!(check_message(big.as_bytes()).unwrap().ts, Ts::Big("100000000000000000000"));
    }

    #[test]
    fn on_time_at_the_edges() {
        assert!(on_time(0, 0, 1, 1) && !on_time(0, 1, 1, 1) && on_time(0, 1, 1, 2));
        assert!(!on_time(0, u64::MAX, 1, 1) && on_time(u64::MAX, u64::MAX, 1, 1));
    }

    #[test]
    fn times_order_as_numbers() {
        assert!(Ts::Small(u64::MAX) < Ts::Big("18446744073709551616"));
        assert!(Ts::Big("99999999999999999999") < Ts::Big("100000000000000000000"));
    }

    #[test]
    fn routing_sums_on_time_partitions_only() {
        let events = [msg("w1", "a", 60_000), msg("w1", "a", 61_000), msg("w1", "b", 0), msg("w1", "a", 125_000)];
        let plan = route(&events, 1, 60_000, 60, true);
        let seen: Vec<Ts> = [60_000, 61_000, 61_000, 125_000].into_iter().map(Ts::Small).collect();
        assert_eq!(plan.seen, seen);
        assert_eq!(plan.parts[0].events, vec![0, 1, 2, 3]);
        assert_eq!(plan.parts[0].counts, Some(vec![(0, vec![(2, 1)]), (1, vec![(0, 2)]), (2, vec![(3, 1)])]));
        assert!(plan.parts[0].late.is_empty());
        // bucket 0 is before the window of 1 bucket ending at its seen's (bucket 1): late
        let plan = route(&events, 1, 60_000, 1, true);
        assert_eq!(plan.parts[0].counts, Some(vec![(1, vec![(0, 2)]), (2, vec![(3, 1)])]));
        assert_eq!(plan.parts[0].late, vec![2]);
        let mut big = events.to_vec();
        big[1].ts = Ts::Big("18446744073709551616");
        assert_eq!(route(&big, 1, 60_000, 60, true).parts[0].counts, None);
        assert_eq!(route(&events, 1, 60_000, 60, false).parts[0].counts, None);
        let plan = route(&events, 7, 60_000, 60, true);
        assert_eq!(plan.parts.iter().map(|p| p.events.len()).sum::<usize>(), 4);
        assert_eq!(plan.parts[crc32(b"w1") as usize % 7].events.len(), 4);
    }
}
