//! The Python module `rankflow._native`: whole batches in, few Python objects out.
//!
//! A batch's raw records are read without a copy and checked with the GIL released
//! (the Kafka client's and the publisher's threads keep running); only then are the
//! valid results made into tuples and the refused ones into `(index, reason, detail)`.

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::order::{percentile_json, Key, KeyOrder, Probe};
use crate::score::{check, Refused, Score, MAX_ID_CHARS, MAX_POINTS, MAX_TIME};
use crate::signature::Signer;

/// Checks 1 to 6 of docs/semantics/boards.md section 1 under one signing key (None: no
/// signature check).
#[pyclass(frozen, module = "rankflow._native")]
struct ScoreChecker {
    signer: Option<Signer>,
}

fn refusal<'py>(py: Python<'py>, refused: &Refused) -> PyResult<Bound<'py, PyTuple>> {
    (refused.reason, refused.detail.as_str()).into_pyobject(py)
}

fn fields<'py>(py: Python<'py>, score: &Score<'_>) -> [Bound<'py, PyAny>; 6] {
    [
        PyString::new(py, &score.game).into_any(),
        PyString::new(py, &score.r#match).into_any(),
        PyString::new(py, &score.player).into_any(),
        score.points.into_pyobject(py).expect("an int").into_any(),
        score.played_at.into_pyobject(py).expect("an int").into_any(),
        score.received_at.into_pyobject(py).expect("an int").into_any(),
    ]
}

#[pymethods]
impl ScoreChecker {
    #[new]
    #[pyo3(signature = (key))]
    fn new(key: Option<&[u8]>) -> Self {
        ScoreChecker { signer: key.map(Signer::new) }
    }

    /// One record: its six fields `(game_id, match_id, player_id, points, played_at,
    /// received_at)`, or `(reason, detail)` naming the first failed check.
    fn check<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
        match check(raw, self.signer.as_ref()) {
            Ok(score) => PyTuple::new(py, fields(py, &score)),
            Err(refused) => refusal(py, &refused),
        }
    }

    /// A batch: `(results, refused)`. Each result is the tuple `(game_id, match_id,
    /// player_id, points, played_at, received_at, offset, raw)`, `raw` the record itself;
    /// each refused record is `(index in the batch, reason, detail)`. A record's offset is
    /// `offsets[i]`, or `start + i` when `offsets` is None.
    #[pyo3(signature = (records, start, offsets=None))]
    fn parse<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyList>,
        start: i64,
        offsets: Option<Vec<i64>>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        if let Some(offsets) = &offsets {
            if offsets.len() != records.len() {
                return Err(PyTypeError::new_err("offsets and records differ in length"));
            }
        }
        let held: Vec<Bound<'py, PyBytes>> =
            records.iter().map(|r| r.cast_into::<PyBytes>().map_err(PyErr::from)).collect::<PyResult<_>>()?;
        let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
        let signer = self.signer.as_ref();
        let checked: Vec<Result<Score<'_>, Refused>> =
            py.detach(|| slices.iter().map(|raw| check(raw, signer)).collect());
        let results = PyList::empty(py);
        let refused = PyList::empty(py);
        for (i, (outcome, raw)) in checked.iter().zip(&held).enumerate() {
            match outcome {
                Ok(score) => {
                    let offset = offsets.as_ref().map_or(start + i as i64, |o| o[i]);
                    let [g, m, p, n, t, r] = fields(py, score);
                    let item = [g, m, p, n, t, r, offset.into_pyobject(py)?.into_any(), raw.clone().into_any()];
                    results.append(PyTuple::new(py, item)?)?;
                }
                Err(why) => refused.append((i, why.reason, why.detail.as_str()))?,
            }
        }
        Ok((results, refused))
    }
}

/// The board index's order (`state/board_index.py`): the `SortedList` methods it uses, over
/// `bytes` keys, each O(log n) but `islice`.
#[pyclass(module = "rankflow._native", name = "KeyOrder")]
struct PyKeyOrder {
    order: KeyOrder,
}

fn bytes_list<'py, 'a>(py: Python<'py>, keys: impl IntoIterator<Item = &'a Key>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, keys.into_iter().map(|k| PyBytes::new(py, k.as_bytes())))
}

#[pymethods]
impl PyKeyOrder {
    #[new]
    #[pyo3(signature = (keys=None))]
    fn new(keys: Option<Vec<Vec<u8>>>) -> Self {
        let keys = keys.unwrap_or_default().iter().map(|k| Key::new(k)).collect();
        PyKeyOrder { order: KeyOrder::from_keys(keys) }
    }

    fn __len__(&self) -> usize {
        self.order.len()
    }

    fn bisect_left(&self, key: &[u8]) -> usize {
        self.order.bisect_left(&Probe::new(key))
    }

    fn index(&self, key: &[u8]) -> PyResult<usize> {
        self.order.index(&Probe::new(key)).ok_or_else(|| PyValueError::new_err("key not in the order"))
    }

    /// Add `key` (a key already there stays once, as it is).
    fn add(&mut self, key: &[u8]) {
        self.order.add(Key::new(key));
    }

    /// Remove `key`; ValueError if it is not there (as `SortedList.remove`).
    fn remove(&mut self, key: &[u8]) -> PyResult<()> {
        if self.order.remove(&Key::new(key)) {
            Ok(())
        } else {
            Err(PyValueError::new_err("key not in the order"))
        }
    }

    fn __getitem__<'py>(&self, py: Python<'py>, at: isize) -> PyResult<Bound<'py, PyBytes>> {
        let at = if at < 0 { at + self.order.len() as isize } else { at };
        usize::try_from(at)
            .ok()
            .and_then(|at| self.order.get(at))
            .map(|k| PyBytes::new(py, k.as_bytes()))
            .ok_or_else(|| PyIndexError::new_err("position out of the order"))
    }

    /// The keys at positions `start .. stop` (non-negative, clamped), as a list.
    fn islice<'py>(&self, py: Python<'py>, start: usize, stop: usize) -> PyResult<Bound<'py, PyList>> {
        bytes_list(py, self.order.slice(start, stop))
    }

    /// A player's answer (`api.board_mirror.BoardMirror.player_bytes`), made in one call: `head`
    /// (up to `"age_ms":`), the age, `"stale"`, `middle` (up to `"player_id":`), `player` (its
    /// JSON), then the score, the rank and competition rank of board key `key`, and the
    /// percentile; the age is now less `published_at`, stale past `stale_after_ms`. Python
    /// makes the fixed parts once per board and snapshot; the numbers are read and written here.
    #[allow(clippy::too_many_arguments)]
    fn player_answer<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        head: &[u8],
        middle: &[u8],
        player: &[u8],
        published_at: i64,
        stale_after_ms: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (score, rank, competition) =
            self.order.ranks_of(key).ok_or_else(|| PyValueError::new_err("not a board key"))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let age = (now - published_at).max(0);
        let stale = if age > stale_after_ms { "true" } else { "false" };
        let percentile = percentile_json(rank as u64, self.order.len() as u64);
        let tail = format!(
            "\"score\":{score},\"rank\":{rank},\"competition_rank\":{competition},\"percentile\":{percentile}}}"
        );
        let age = format!("{age},\"stale\":{stale}");
        let mut out = Vec::with_capacity(head.len() + middle.len() + player.len() + age.len() + tail.len() + 1);
        out.extend_from_slice(head);
        out.extend_from_slice(age.as_bytes());
        out.extend_from_slice(middle);
        out.extend_from_slice(player);
        out.push(b',');
        out.extend_from_slice(tail.as_bytes());
        Ok(PyBytes::new(py, &out))
    }

    /// Every key in order, as a list.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        bytes_list(py, self.order.iter())
    }

    /// The structure's invariants (panics, as a Python exception, on the first one broken).
    fn _check(&self) {
        self.order.check();
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ScoreChecker>()?;
    m.add_class::<PyKeyOrder>()?;
    m.add("MAX_ID_CHARS", MAX_ID_CHARS)?;
    m.add("MAX_POINTS", MAX_POINTS)?;
    m.add("MAX_TIME", MAX_TIME)?;
    Ok(())
}
