//! Activity events ([`crate::messages`]) in `rankflow._native`: a batch's raw records in,
//! checked with the GIL released, and either the valid events or, for the activity flow,
//! each counter partition's share out. `state/message_events.py` is the typed boundary.
//!
//! A `ts` beyond 64 bits comes out as its literal (a `str`): Python's `int()` refuses
//! literals beyond 4,300 digits, so the boundary makes the exact int of it.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::messages::{check_message, route, Message, Ts};
use crate::score::Refused;

fn ts_object<'py>(py: Python<'py>, ts: Ts<'_>) -> Bound<'py, PyAny> {
    match ts {
        Ts::Small(t) => t.into_pyobject(py).expect("an int").into_any(),
        Ts::Big(literal) => PyString::new(py, literal).into_any(),
    }
}

/// The batch's records as bytes, read without a copy.
fn held<'py>(records: &Bound<'py, PyList>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    records.iter().map(|r| r.cast_into::<PyBytes>().map_err(PyErr::from)).collect()
}

fn offset_of(start: i64, offsets: &Option<Vec<i64>>, i: usize) -> i64 {
    offsets.as_ref().map_or(start + i as i64, |o| o[i])
}

fn check_offsets(records: &Bound<'_, PyList>, offsets: &Option<Vec<i64>>) -> PyResult<()> {
    match offsets {
        Some(o) if o.len() != records.len() => Err(PyTypeError::new_err("offsets and records differ in length")),
        _ => Ok(()),
    }
}

/// Checks 1 to 3 of a batch: each record's outcome, with the GIL released.
fn check_all<'a>(slices: &[&'a [u8]], py: Python<'_>) -> Vec<Result<Message<'a>, Refused>> {
    py.detach(|| slices.iter().map(|raw| check_message(raw)).collect())
}

/// One record: `(workspace_id, channel_id, user_id, ts)`, or `(reason, detail)` naming the
/// first failed check.
#[pyfunction(name = "check_message")]
fn py_check_message<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    match check_message(raw) {
        Ok(m) => PyTuple::new(
            py,
            [
                PyString::new(py, &m.workspace).into_any(),
                PyString::new(py, &m.channel).into_any(),
                PyString::new(py, &m.user).into_any(),
                ts_object(py, m.ts),
            ],
        ),
        Err(why) => (why.reason, why.detail.as_str()).into_pyobject(py),
    }
}

/// A batch: `(events, refused)`, each event `(workspace_id, channel_id, user_id, ts, offset,
/// raw)`, each refused record `(index in the batch, reason, detail)`. A record's offset is
/// `offsets[i]`, or `start + i` when `offsets` is None.
#[pyfunction]
#[pyo3(signature = (records, start, offsets=None))]
fn check_messages<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    start: i64,
    offsets: Option<Vec<i64>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    check_offsets(records, &offsets)?;
    let held = held(records)?;
    let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
    let checked = check_all(&slices, py);
    let events = PyList::empty(py);
    let refused = PyList::empty(py);
    for (i, (outcome, raw)) in checked.iter().zip(&held).enumerate() {
        match outcome {
            Ok(m) => events.append(PyTuple::new(
                py,
                [
                    PyString::new(py, &m.workspace).into_any(),
                    PyString::new(py, &m.channel).into_any(),
                    PyString::new(py, &m.user).into_any(),
                    ts_object(py, m.ts),
                    offset_of(start, &offsets, i).into_pyobject(py)?.into_any(),
                    raw.clone().into_any(),
                ],
            )?)?,
            Err(why) => refused.append((i, why.reason, why.detail.as_str()))?,
        }
    }
    Ok((events, refused))
}

/// The activity flow's parse and routing of a batch (`operators.window_counter`): checks 1
/// to 3, then each valid event to its counter partition with its batch's running greatest
/// `ts`, summed per bucket and pair where the partition's events allow it.
#[pyclass(frozen, module = "rankflow._native")]
struct MessageRouter {
    partitions: usize,
    bucket_ms: u64,
    window: u64,
    sum: bool,
}

#[pymethods]
impl MessageRouter {
    /// `sum` False: every partition gets its events one by one (mode `users`, a global
    /// summary: they need each event).
    #[new]
    fn new(partitions: usize, bucket_ms: u64, window: u64, sum: bool) -> PyResult<Self> {
        if partitions == 0 || bucket_ms == 0 || window == 0 {
            return Err(PyValueError::new_err("partitions, bucket_ms and window must be >= 1"));
        }
        Ok(MessageRouter { partitions, bucket_ms, window, sum })
    }

    /// A batch: `(parts, seen, refused)`. `parts` has one item per counter partition,
    /// `(events, counts, late, raws, packed)`: either `events`, its events one by one as
    /// `(workspace_id, channel_id, user_id, ts, seen, offset, raw)` (`counts` None, the
    /// lists empty), or `counts`, `{bucket: {(workspace_id, channel_id): n}}` over its events
    /// on time within their batch, `late` the others one by one, `raws` every event's record
    /// and `packed` their offsets and `seen` (for [`Self::events`]); `events` None. `seen`: the batch's greatest valid `ts` (None without any); refused
    /// as [`check_messages`].
    #[pyo3(signature = (records, start, offsets=None))]
    fn route<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyList>,
        start: i64,
        offsets: Option<Vec<i64>>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>, Bound<'py, PyList>)> {
        check_offsets(records, &offsets)?;
        let held = held(records)?;
        let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
        let (valid, at, refused_all, plan) = py.detach(|| {
            let mut valid = Vec::with_capacity(slices.len());
            let mut at = Vec::with_capacity(slices.len());
            let mut refused = Vec::new();
            for (i, raw) in slices.iter().enumerate() {
                match check_message(raw) {
                    Ok(m) => {
                        valid.push(m);
                        at.push(i);
                    }
                    Err(why) => refused.push((i, why)),
                }
            }
            let plan = route(&valid, self.partitions, self.bucket_ms, self.window, self.sum);
            (valid, at, refused, plan)
        });
        let refused = PyList::empty(py);
        for (i, why) in &refused_all {
            refused.append((*i, why.reason, why.detail.as_str()))?;
        }
        // an event one by one: `(workspace_id, channel_id, user_id, ts, seen, offset, raw)`
        let event = |e: usize| -> PyResult<Bound<'py, PyTuple>> {
            let m = &valid[e];
            let i = at[e];
            PyTuple::new(
                py,
                [
                    PyString::new(py, &m.workspace).into_any(),
                    PyString::new(py, &m.channel).into_any(),
                    PyString::new(py, &m.user).into_any(),
                    ts_object(py, m.ts),
                    ts_object(py, plan.seen[e]),
                    offset_of(start, &offsets, i).into_pyobject(py)?.into_any(),
                    held[i].clone().into_any(),
                ],
            )
        };
        let parts = PyList::empty(py);
        for part in &plan.parts {
            match &part.counts {
                None => {
                    let events = PyList::empty(py);
                    for &e in &part.events {
                        events.append(event(e)?)?;
                    }
                    parts.append((events, py.None(), PyList::empty(py), PyList::empty(py), PyBytes::new(py, b"")))?;
                }
                Some(buckets) => {
                    let counts = PyDict::new(py);
                    for (b, pairs) in buckets {
                        let keys = PyDict::new(py);
                        for &(e, n) in pairs {
                            let m = &valid[e];
                            let pair =
                                PyTuple::new(py, [PyString::new(py, &m.workspace), PyString::new(py, &m.channel)])?;
                            keys.set_item(pair, n)?;
                        }
                        counts.set_item(b, keys)?;
                    }
                    let raws = PyList::empty(py);
                    let mut packed = Vec::with_capacity(part.events.len() * 16);
                    for &e in &part.events {
                        raws.append(&held[at[e]])?;
                        let Ts::Small(seen) = plan.seen[e] else { unreachable!("summed partitions: small times") };
                        packed.extend_from_slice(&offset_of(start, &offsets, at[e]).to_le_bytes());
                        packed.extend_from_slice(&seen.to_le_bytes());
                    }
                    let late = PyList::empty(py);
                    for &e in &part.late {
                        late.append(event(e)?)?;
                    }
                    parts.append((py.None(), counts, late, raws, PyBytes::new(py, &packed)))?;
                }
            }
        }
        let seen = match plan.seen.last() {
            None => py.None().into_bound(py),
            Some(&t) => ts_object(py, t),
        };
        Ok((parts, seen, refused))
    }

    /// A summed part's events one by one, as [`Self::route`] gives them unsummed, from its
    /// `raws` and `packed` (the counter stage's rare path: a part with an on-time event
    /// before the window, or late by more than the window within its source partition).
    fn events<'py>(&self, py: Python<'py>, raws: &Bound<'py, PyList>, packed: &[u8]) -> PyResult<Bound<'py, PyList>> {
        if packed.len() != raws.len() * 16 {
            return Err(PyValueError::new_err("packed holds 16 bytes per record"));
        }
        let events = PyList::empty(py);
        for (raw, chunk) in raws.iter().zip(packed.chunks_exact(16)) {
            let bytes = raw.cast_into::<PyBytes>()?;
            let Ok(m) = check_message(bytes.as_bytes()) else {
                return Err(PyValueError::new_err("a summed part holds valid records only"));
            };
            let offset = i64::from_le_bytes(chunk[..8].try_into().expect("8 bytes"));
            let seen = u64::from_le_bytes(chunk[8..].try_into().expect("8 bytes"));
            events.append(PyTuple::new(
                py,
                [
                    PyString::new(py, &m.workspace).into_any(),
                    PyString::new(py, &m.channel).into_any(),
                    PyString::new(py, &m.user).into_any(),
                    ts_object(py, m.ts),
                    seen.into_pyobject(py)?.into_any(),
                    offset.into_pyobject(py)?.into_any(),
                    bytes.into_any(),
                ],
            )?)?;
        }
        Ok(events)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MessageRouter>()?;
    m.add_function(wrap_pyfunction!(py_check_message, m)?)?;
    m.add_function(wrap_pyfunction!(check_messages, m)?)?;
    Ok(())
}
