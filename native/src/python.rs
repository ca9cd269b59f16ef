//! The Python module `rankflow._native`: whole batches in, few Python objects out.
//!
//! A batch's raw records are read without a copy and checked with the GIL released
//! (the Kafka client's and the publisher's threads keep running); only then are the
//! valid results made into tuples and the refused ones into `(index, reason, detail)`.

use std::fmt::Write;

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::order::{json_string, keyed_score, percentile_json, BadKey, BoardKeys, Key, Probe};
use crate::score::{check, check_grouped, Refused, Score, MAX_ID_CHARS, MAX_POINTS, MAX_TIME};
use crate::signature::Signer;
use crate::tags::target_digest;

/// Checks 1 to 6 of docs/semantics/boards.md section 1 under one signing key (None: no
/// signature check).
#[pyclass(frozen, module = "rankflow._native")]
struct ScoreChecker {
    signer: Option<Signer>,
    /// `--group-by FIELD` (docs/semantics/boards.md 10): each result also carries its group's key.
    group: Option<String>,
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
    #[pyo3(signature = (key, group=None))]
    fn new(key: Option<&[u8]>, group: Option<String>) -> Self {
        ScoreChecker { signer: key.map(Signer::new), group }
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
    /// player_id, points, played_at, received_at, offset, raw)`, `raw` the record itself,
    /// and with a group field a ninth, its group's game key `GAME@FIELD=VALUE` or None;
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
        let group = self.group.as_deref();
        let checked: Vec<Result<Score<'_>, Refused>> = py.detach(|| match group {
            None => slices.iter().map(|raw| check(raw, signer)).collect(),
            Some(field) => slices.iter().map(|raw| check_grouped(raw, signer, field)).collect(),
        });
        let results = PyList::empty(py);
        let refused = PyList::empty(py);
        for (i, (outcome, raw)) in checked.iter().zip(&held).enumerate() {
            match outcome {
                Ok(score) => {
                    let offset = offsets.as_ref().map_or(start + i as i64, |o| o[i]);
                    let [g, m, p, n, t, r] = fields(py, score);
                    let item = [g, m, p, n, t, r, offset.into_pyobject(py)?.into_any(), raw.clone().into_any()];
                    match group {
                        None => results.append(PyTuple::new(py, item)?)?,
                        Some(field) => {
                            // a ninth field: the group's boards' game key, `GAME@FIELD=VALUE`, or None
                            let key = match &score.group {
                                Some(value) => PyString::new(py, &format!("{}@{field}={value}", score.game)).into_any(),
                                None => py.None().into_bound(py),
                            };
                            let [g, m, p, n, t, r, o, w] = item;
                            results.append(PyTuple::new(py, [g, m, p, n, t, r, o, w, key])?)?
                        }
                    }
                }
                Err(why) => refused.append((i, why.reason, why.detail.as_str()))?,
            }
        }
        Ok((results, refused))
    }
}

/// One board of the board index (`state/board_index.py`): its keys in order and each
/// player's key, every query O(log n) but `islice` and `keys`.
#[pyclass(module = "rankflow._native", name = "BoardKeys")]
struct PyBoardKeys {
    board: BoardKeys,
}

fn bytes_list<'py, 'a>(py: Python<'py>, keys: impl IntoIterator<Item = &'a Key>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, keys.into_iter().map(|k| PyBytes::new(py, k.as_bytes())))
}

fn bad_key(why: BadKey) -> PyErr {
    PyValueError::new_err(match why {
        BadKey::Short => "a board key has 16 bytes of score and reached_at before its player",
        BadKey::Player => "a board holds one key per player",
    })
}

#[pymethods]
impl PyBoardKeys {
    /// The board of `keys`, one per player, in any order.
    #[new]
    #[pyo3(signature = (keys=None))]
    fn new(keys: Option<Vec<Vec<u8>>>) -> PyResult<Self> {
        let keys = keys.unwrap_or_default().iter().map(|k| Key::new(k)).collect();
        Ok(PyBoardKeys { board: BoardKeys::from_keys(keys).map_err(bad_key)? })
    }

    fn __len__(&self) -> usize {
        self.board.order().len()
    }

    /// The player's key, None if not on the board.
    fn key<'py>(&self, py: Python<'py>, player: &str) -> Option<Bound<'py, PyBytes>> {
        self.board.key(player.as_bytes()).map(|k| PyBytes::new(py, &k))
    }

    /// Put the key's player at `key`; the key it had (None: not on the board; `key` itself:
    /// unchanged).
    fn upsert<'py>(&mut self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(self.board.upsert(key).map_err(bad_key)?.map(|k| PyBytes::new(py, &k)))
    }

    /// How many keys sort before `key` (on the board or not).
    fn bisect_left(&self, key: &[u8]) -> usize {
        self.board.order().bisect_left(&Probe::new(key))
    }

    /// The player's rank - 1, None if not on the board.
    fn rank0(&self, player: &str) -> Option<usize> {
        let key = self.board.key(player.as_bytes())?;
        self.board.order().index(&Probe::new(&key))
    }

    fn __getitem__<'py>(&self, py: Python<'py>, at: isize) -> PyResult<Bound<'py, PyBytes>> {
        let order = self.board.order();
        let at = if at < 0 { at + order.len() as isize } else { at };
        usize::try_from(at)
            .ok()
            .and_then(|at| order.get(at))
            .map(|k| PyBytes::new(py, k.as_bytes()))
            .ok_or_else(|| PyIndexError::new_err("position out of the board"))
    }

    /// The keys at positions `start .. stop` (non-negative, clamped), as a list.
    fn islice<'py>(&self, py: Python<'py>, start: usize, stop: usize) -> PyResult<Bound<'py, PyList>> {
        bytes_list(py, self.board.order().slice(start, stop))
    }

    /// A player's answer (`api.board_mirror.BoardMirror.player_bytes`), made in one call; None
    /// if the player is not on the board. `head` (up to `"age_ms":`), the age, `"stale"`,
    /// `middle` (up to `"player_id":`), `player_json` (the id's JSON), then the score, the
    /// rank, the competition rank and the percentile; the age is now less `published_at`,
    /// stale past `stale_after_ms`. Python makes the fixed parts once per board and snapshot.
    #[allow(clippy::too_many_arguments)]
    fn player_answer<'py>(
        &self,
        py: Python<'py>,
        player: &str,
        head: &[u8],
        middle: &[u8],
        player_json: &[u8],
        published_at: i64,
        stale_after_ms: i64,
    ) -> Option<Bound<'py, PyBytes>> {
        let (out, _) = self.answer(player, head, middle, player_json, published_at, stale_after_ms)?;
        Some(PyBytes::new(py, &out))
    }

    /// [`Self::player_answer`] and its cache validators in one call (`api.board_mirror.
    /// BoardMirror.player_reply`): `(body, lines)`, the lines `tag`, the request target's
    /// digest (BLAKE2s of 6 bytes, in hex, as `hashlib.blake2s(target, digest_size=6)`), then
    /// `fresh` or `stale` as the answer is (`api.http_cache.tag_parts` makes the three once per
    /// snapshot). The id's JSON is written here. None if the player is not on the board.
    ///
    /// Why: a player's rank is a new target almost every request; made apart, its answer and
    /// its validators were two trips through Python per request (docs/benchmarks.md).
    #[allow(clippy::too_many_arguments)]
    fn player_reply<'py>(
        &self,
        py: Python<'py>,
        player: &str,
        head: &[u8],
        middle: &[u8],
        published_at: i64,
        stale_after_ms: i64,
        target: &[u8],
        tag: &[u8],
        fresh: &[u8],
        stale: &[u8],
    ) -> Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let mut player_json = String::with_capacity(player.len() + 2);
        json_string(&mut player_json, player);
        let (body, is_stale) =
            self.answer(player, head, middle, player_json.as_bytes(), published_at, stale_after_ms)?;
        let end = if is_stale { stale } else { fresh };
        let mut lines = Vec::with_capacity(tag.len() + 12 + end.len());
        lines.extend_from_slice(tag);
        lines.extend_from_slice(target_digest(target).as_bytes());
        lines.extend_from_slice(end);
        Some((PyBytes::new(py, &body), PyBytes::new(py, &lines)))
    }

    /// Every key in order, as a list.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        bytes_list(py, self.board.order().iter())
    }

    /// From now on record what changes (`state.board_index.InFlight`): the `*_before`
    /// queries and the answers are the board as it is now, until `settle`.
    fn begin(&mut self) {
        self.board.begin();
    }

    /// Forget what was recorded: the board as it is is the one served again.
    fn settle(&mut self) {
        self.board.settle();
    }

    /// Whether anything changed since `begin`.
    fn recorded(&self) -> bool {
        self.board.recorded()
    }

    /// Entries before the change set being applied.
    fn len_before(&self) -> usize {
        self.board.len_before()
    }

    /// The player's key before the change set being applied, None if not on the board then.
    fn key_before<'py>(&self, py: Python<'py>, player: &str) -> Option<Bound<'py, PyBytes>> {
        self.board.key_before(player.as_bytes()).map(|k| PyBytes::new(py, &k))
    }

    /// Keys before `key` (on the board or not) before the change set being applied.
    fn below_before(&self, key: &[u8]) -> usize {
        self.board.below_before(key)
    }

    /// The keys the change set being applied added that are still there, and those it
    /// removed that were there before it, each list in order.
    fn flight_keys<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let (added, removed) = self.board.flight_keys();
        Ok((bytes_list(py, added)?, bytes_list(py, removed)?))
    }

    /// The structure's invariants (panics, as a Python exception, on the first one broken).
    fn _check(&self) {
        self.board.check();
    }
}

impl PyBoardKeys {
    /// A player's answer and whether it says `"stale":true` (see `player_answer`): the board
    /// as it was before the change set being applied, if one is.
    fn answer(
        &self,
        player: &str,
        head: &[u8],
        middle: &[u8],
        player_json: &[u8],
        published_at: i64,
        stale_after_ms: i64,
    ) -> Option<(Vec<u8>, bool)> {
        let key = self.board.key_before(player.as_bytes())?;
        let (score, rank, competition) = self.board.ranks_before(&key)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let age = (now - published_at).max(0);
        let is_stale = age > stale_after_ms;
        let percentile = percentile_json(rank as u64, self.board.len_before() as u64);
        let tail = format!(
            ",\"score\":{score},\"rank\":{rank},\"competition_rank\":{competition},\"percentile\":{percentile}}}"
        );
        let age = format!("{age},\"stale\":{is_stale}");
        let mut out = Vec::with_capacity(head.len() + middle.len() + player_json.len() + age.len() + tail.len());
        out.extend_from_slice(head);
        out.extend_from_slice(age.as_bytes());
        out.extend_from_slice(middle);
        out.extend_from_slice(player_json);
        out.extend_from_slice(tail.as_bytes());
        Some((out, is_stale))
    }
}

/// A keyed board's entries `{player: (score, reached_at)}` as the publish script takes their
/// sorted-set scores: the JSON object `{player: double}` (`board_layout.KeyedBoard.score` of
/// each, the doubles written exactly: shortest round trip, exponent form); None when an entry
/// is outside what the key holds (the caller says which).
#[pyfunction]
fn keyed_scores<'py>(
    py: Python<'py>,
    entries: &Bound<'py, PyDict>,
    bits: u32,
    cap: i64,
    origin: i64,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut out = String::with_capacity(2 + entries.len() * 40);
    out.push('{');
    for (player, entry) in entries.iter() {
        let (score, reached_at): (i64, i64) = entry.extract()?;
        let Some(value) = keyed_score(score, reached_at, bits, cap, origin) else { return Ok(None) };
        if out.len() > 1 {
            out.push(',');
        }
        json_string(&mut out, player.cast::<PyString>()?.to_str()?);
        write!(out, ":{value:e}").expect("a String takes any write");
    }
    out.push('}');
    Ok(Some(PyBytes::new(py, out.as_bytes())))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ScoreChecker>()?;
    m.add_class::<PyBoardKeys>()?;
    m.add_function(wrap_pyfunction!(keyed_scores, m)?)?;
    m.add("MAX_ID_CHARS", MAX_ID_CHARS)?;
    m.add("MAX_POINTS", MAX_POINTS)?;
    m.add("MAX_TIME", MAX_TIME)?;
    crate::rules_python::register(m)?;
    crate::messages_python::register(m)?;
    crate::board_table_python::register(m)?;
    crate::changes_python::register(m)?;
    Ok(())
}
