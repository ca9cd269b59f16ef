//! The board rules ([`crate::rules`]) in `rankflow._native`: one player's result in, the
//! verdict and the changed entries out, the record updated in place or made (a player's
//! first result is a single record's bytes, a later one a held [`PyRecord`]).
//! `state/board_rules.py` is the typed boundary the flow calls.

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::board_table::FxMap;
use crate::changes_python::PlayerChanges;
use crate::rules::{
    pack_single, single_fields, Aggregate, BadRecord, Board, Entry, First, GameBoards, GameResults, Record, Span,
    Verdict, DAY_MS,
};

/// The refused results of [`BoardRules::apply_all`], `(verdict, result)`, duplicates aside.
type Refused<'py> = Vec<(Bound<'py, PyString>, Bound<'py, PyAny>)>;

/// A single record's fields `(R, game, match, points, played_at)`.
type Fields<'a> = (i64, &'a str, &'a str, i64, i64);

const NAMES_MAX: usize = 4096; // period names cached; a log spanning more days starts afresh

fn bad(_: BadRecord) -> PyErr {
    PyValueError::new_err("not a player record of the board rules")
}

/// A player's record after its first result: held by the kernel, changed in place. Its list
/// form (`record_unpack`) is what a changelog stores, and pickling goes through it.
#[pyclass(module = "rankflow._native", name = "Record")]
pub(crate) struct PyRecord {
    pub(crate) record: Record,
}

#[pymethods]
impl PyRecord {
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyRecord>().is_ok_and(|o| o.borrow().record == self.record)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyList>,))> {
        let pack = py.import("rankflow._native")?.getattr("record_pack")?;
        Ok((pack, (list_form(py, &self.record)?,)))
    }

    /// R: the newest receipt among the player's events that passed checks 1 to 6.
    #[getter]
    fn r(&self) -> i64 {
        self.record.r
    }

    /// When to scan the results for ones to drop (the least played_at held, or 1 << 62).
    #[getter]
    fn oldest(&self) -> i64 {
        self.record.oldest
    }

    /// Drop the results out of the identity window now (section 2), not lazily.
    fn forget_expired(&mut self) {
        let record = &mut self.record;
        record.oldest = record.forget(record.r - DAY_MS);
    }
}

/// A record either way: a single one's bytes or a held one.
enum Held<'a, 'py> {
    Single(&'a [u8]),
    Object(Bound<'py, PyRecord>),
}

fn held<'a, 'py>(record: &'a Bound<'py, PyAny>) -> PyResult<Held<'a, 'py>> {
    if let Ok(bytes) = record.cast::<PyBytes>() {
        return Ok(Held::Single(bytes.as_bytes()));
    }
    Ok(Held::Object(record.cast::<PyRecord>()?.clone()))
}

/// Run `f` over the record a `Held` says.
fn with_record<T>(record: &Held<'_, '_>, f: impl FnOnce(&Record) -> PyResult<T>) -> PyResult<T> {
    match record {
        Held::Single(data) => f(&Record::from_single(data).map_err(bad)?),
        Held::Object(object) => f(&object.borrow().record),
    }
}

/// The rules under a run's seasons, with the Python strings of verdicts and board names
/// made once (a result's entries name its day and week: one dict lookup, not a format).
#[pyclass(frozen, module = "rankflow._native")]
struct BoardRules {
    seasons: Vec<Span>,
    season_names: Vec<Py<PyString>>,
    verdicts: [Py<PyString>; 5],
    all: Py<PyString>,
    best: Py<PyString>,
    periods: Mutex<FxMap<Board, Py<PyString>>>, // Fx: keys are day numbers, two lookups a result
}

impl BoardRules {
    fn name<'py>(&self, py: Python<'py>, board: &Board) -> Bound<'py, PyString> {
        match board {
            Board::All => return self.all.bind(py).clone(),
            Board::Best => return self.best.bind(py).clone(),
            Board::Season(name) => {
                return match self.seasons.iter().position(|s| *s.name == **name) {
                    Some(at) => self.season_names[at].bind(py).clone(),
                    None => PyString::new(py, &board.name()),
                };
            }
            Board::Daily(_) | Board::Weekly(_) => {}
        }
        let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = periods.get(board) {
            return name.bind(py).clone();
        }
        if periods.len() >= NAMES_MAX {
            periods.clear();
        }
        let name = PyString::intern(py, &board.name());
        periods.insert(board.clone(), name.clone().unbind());
        name
    }

    /// `(record, verdict, entries)`: `entries` of `game`'s boards, then `grouped`'s of its
    /// group's (docs/semantics/boards.md 10), each `(game_id, board, score, reached_at, new)`.
    fn outcome<'py>(
        &self,
        py: Python<'py>,
        record: Bound<'py, PyAny>,
        verdict: Verdict,
        game: &Bound<'py, PyString>,
        entries: &[Entry],
        grouped: Option<(&Bound<'py, PyString>, &[Entry])>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyString>, Bound<'py, PyTuple>)> {
        let mut out = Vec::with_capacity(entries.len() + grouped.map_or(0, |(_, g)| g.len()));
        let all = entries.iter().map(|e| (game, e));
        let groups = grouped.into_iter().flat_map(|(group, g)| g.iter().map(move |e| (group, e)));
        for (game, e) in all.chain(groups) {
            let item: [Bound<'py, PyAny>; 5] = [
                game.clone().into_any(),
                self.name(py, &e.board).into_any(),
                e.score.into_pyobject(py)?.into_any(),
                e.reached_at.into_pyobject(py)?.into_any(),
                PyBool::new(py, e.new).to_owned().into_any(),
            ];
            out.push(PyTuple::new(py, item)?);
        }
        let verdict = match verdict {
            Verdict::Accepted => 0,
            Verdict::Duplicate => 1,
            Verdict::TooOld => 2,
            Verdict::InFuture => 3,
            Verdict::Conflict => 4,
        };
        Ok((record, self.verdicts[verdict].bind(py).clone(), PyTuple::new(py, out)?))
    }
}

#[pymethods]
impl BoardRules {
    /// `seasons`: `(board, start, end)` per season, its board `season:NAME`.
    #[new]
    #[pyo3(signature = (seasons=Vec::new()))]
    fn new(py: Python<'_>, seasons: Vec<(String, i64, i64)>) -> PyResult<Self> {
        let mut spans = Vec::with_capacity(seasons.len());
        let mut names = Vec::with_capacity(seasons.len());
        for (board, start, end) in seasons {
            let Some(name) = board.strip_prefix("season:") else {
                return Err(PyValueError::new_err(format!("not a season's board: {board:?}")));
            };
            spans.push(Span { name: name.to_owned(), start, end });
            names.push(PyString::intern(py, &board).unbind());
        }
        let interned = |s: &str| PyString::intern(py, s).unbind();
        Ok(BoardRules {
            seasons: spans,
            season_names: names,
            verdicts: [
                interned("accepted"),
                interned("duplicate"),
                interned("too_old"),
                interned("in_future"),
                interned("conflict"),
            ],
            all: interned("all"),
            best: interned("best"),
            periods: Mutex::new(FxMap::default()),
        })
    }

    /// One result that passed checks 1 to 6, as the parse kernel hands it on (a
    /// `state.score_events.ScoreEvent`, `(game_id, match_id, player_id, points, played_at,
    /// received_at, offset, raw)`, with a ninth field in a run that groups its boards):
    /// `(record, verdict, entries)`. `record` is the player's record after it: the same
    /// object, changed in place, when the player had a held one; each entry is `(game_id,
    /// board, score, reached_at, new)`. The ninth field, when there is one: the game key of
    /// the result's group (`GAME@FIELD=VALUE`, docs/semantics/boards.md 10), whose boards an
    /// accepted result enters too, their entries after the game's; None: no group. One
    /// tuple in, whichever shape, so the player stage has one loop for both kinds of run.
    ///
    /// `noted`: a shard's `PlayerChanges` (recovery on), which the result is noted into for the
    /// barrier's changelog frame (`native/src/changes.rs`).
    #[pyo3(signature = (record, event, noted=None))]
    fn apply<'py>(
        &self,
        py: Python<'py>,
        record: Option<Bound<'py, PyAny>>,
        event: &Bound<'py, PyTuple>,
        noted: Option<Bound<'py, PlayerChanges>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyString>, Bound<'py, PyTuple>)> {
        if event.len() < 6 {
            return Err(PyValueError::new_err(
                "a result is (game_id, match_id, player_id, points, played_at, received_at, ...)",
            ));
        }
        let game = event.get_item(0)?.cast_into::<PyString>()?;
        let match_id = event.get_borrowed_item(1)?.cast::<PyString>()?; // borrowed: no reference count
        let r#match = match_id.to_str()?;
        let points: i64 = event.get_borrowed_item(3)?.extract()?;
        let played_at: i64 = event.get_borrowed_item(4)?.extract()?;
        let received_at: i64 = event.get_borrowed_item(5)?.extract()?;
        // a ninth field only in a grouped run (asking an 8-tuple for it would make an IndexError)
        let group = if event.len() > 8 {
            let group = event.get_item(8)?;
            if group.is_none() {
                None
            } else {
                Some(group.cast_into::<PyString>()?)
            }
        } else {
            None
        };
        let g = game.to_str()?;
        let group_key = match &group {
            Some(group) => Some(group.to_str()?),
            None => None,
        };
        let seasons = &self.seasons;
        // the result in the shard's changes: `whole` when the record was new or single before it
        let note = |whole: bool, verdict: Verdict, entries: &[Entry], extra: &[Entry]| -> PyResult<()> {
            let Some(changes) = &noted else { return Ok(()) };
            let player = event.get_item(2)?;
            let mut changes = changes.borrow_mut();
            let player = player.cast::<PyString>()?;
            let mine = changes.noted(player)?;
            if whole {
                mine.set_whole();
            }
            if verdict == Verdict::Accepted {
                mine.note_result(g, r#match, points, played_at, entries);
                if let Some(key) = group_key {
                    mine.note_group(key, extra);
                }
            }
            Ok(())
        };
        // a group's boards, entered after the game's by an accepted result
        let grouped = |record: &mut Record, verdict: Verdict| match (group_key, verdict) {
            (Some(key), Verdict::Accepted) => record.enter_group(key, points, played_at, seasons),
            _ => Vec::new(),
        };
        let Some(record) = record else {
            return match Record::first(g, r#match, points, played_at, received_at, seasons, group_key.is_some()) {
                First::Single(single, entries) => {
                    note(true, Verdict::Accepted, &entries, &[])?;
                    self.outcome(py, PyBytes::new(py, &single).into_any(), Verdict::Accepted, &game, &entries, None)
                }
                First::Held(mut record, verdict, entries) => {
                    let extra = grouped(&mut record, verdict);
                    note(true, verdict, &entries, &extra)?;
                    let object = Bound::new(py, PyRecord { record })?.into_any();
                    self.outcome(py, object, verdict, &game, &entries, group.as_ref().map(|k| (k, &extra[..])))
                }
            };
        };
        if let Ok(object) = record.cast::<PyRecord>() {
            let (verdict, entries, extra) = {
                let held = &mut object.borrow_mut().record;
                let (verdict, entries) = held.apply(g, r#match, points, played_at, received_at, seasons);
                let extra = grouped(held, verdict);
                (verdict, entries, extra)
            };
            note(false, verdict, &entries, &extra)?;
            return self.outcome(py, record, verdict, &game, &entries, group.as_ref().map(|k| (k, &extra[..])));
        }
        let mut held = Record::from_single(record.cast::<PyBytes>()?.as_bytes()).map_err(bad)?;
        let (verdict, entries) = held.apply(g, r#match, points, played_at, received_at, seasons);
        let extra = grouped(&mut held, verdict);
        note(true, verdict, &entries, &extra)?;
        let object = Bound::new(py, PyRecord { record: held })?.into_any();
        self.outcome(py, object, verdict, &game, &entries, group.as_ref().map(|k| (k, &extra[..])))
    }

    /// A batch of results through [`BoardRules::apply`], as the player stage's loop did it one
    /// call a result: each result's player's record looked up in `records` (by the result's
    /// `player_id`) and put back when a new object holds it, each accepted result's
    /// `(player_id, entries)` appended to `entries`, and the verdicts counted into `tally`
    /// (verdict -> count) once at the end. Returns the duplicates' count and the other refused
    /// results, `(verdict, result)` in input order: the stage makes their dead letters. One call a
    /// batch, so the loop and its tally cost no Python bytecode per result.
    #[pyo3(signature = (records, results, entries, tally, noted=None))]
    fn apply_all<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyDict>,
        results: &Bound<'py, PyAny>,
        entries: &Bound<'py, PyList>,
        tally: &Bound<'py, PyDict>,
        noted: Option<Bound<'py, PlayerChanges>>,
    ) -> PyResult<(usize, Refused<'py>)> {
        let mut counts = [0usize; 5];
        let mut refused = Vec::new();
        for event in results.try_iter()? {
            let event = event?.cast_into::<PyTuple>()?;
            if event.len() < 6 {
                return Err(PyValueError::new_err(
                    "a result is (game_id, match_id, player_id, points, played_at, received_at, ...)",
                ));
            }
            let player = event.get_item(2)?;
            let old = records.get_item(&player)?;
            let (record, verdict, changes) = self.apply(py, old.clone(), &event, noted.clone())?;
            if !old.is_some_and(|old| old.is(&record)) {
                records.set_item(&player, record)?; // a held record changes in place
            }
            let at = (self.verdicts.iter().position(|v| v.bind(py).is(&verdict)))
                .ok_or_else(|| PyValueError::new_err("a verdict of the rules"))?;
            counts[at] += 1;
            match at {
                0 => entries.append((player, changes))?,
                1 => {}
                _ => refused.push((verdict, event.into_any())),
            }
        }
        for (verdict, n) in self.verdicts.iter().zip(counts) {
            if n > 0 {
                let verdict = verdict.bind(py);
                let had: usize = match tally.get_item(verdict)? {
                    Some(had) => had.extract()?,
                    None => 0,
                };
                tally.set_item(verdict, had + n)?;
            }
        }
        Ok((counts[1], refused))
    }
}

fn aggregate_list<'py>(py: Python<'py>, board: &Board, agg: &Aggregate) -> PyResult<Bound<'py, PyList>> {
    if *board == Board::Best {
        PyList::new(py, [agg.score, agg.first])
    } else {
        PyList::new(py, [agg.score, agg.last, agg.first])
    }
}

fn list_form<'py>(py: Python<'py>, held: &Record) -> PyResult<Bound<'py, PyList>> {
    let results = PyDict::new(py);
    for game in &held.results {
        let matches = PyDict::new(py);
        for (m, points, played_at) in &game.matches {
            matches.set_item(&**m, (*points, *played_at))?;
        }
        results.set_item(&*game.game, matches)?;
    }
    let boards = PyDict::new(py);
    for game in &held.boards {
        let mine = PyDict::new(py);
        for (board, agg) in &game.boards {
            mine.set_item(board.name(), aggregate_list(py, board, agg)?)?;
        }
        boards.set_item(&*game.game, mine)?;
    }
    let items: [Bound<'py, PyAny>; 4] = [
        held.r.into_pyobject(py)?.into_any(),
        held.oldest.into_pyobject(py)?.into_any(),
        results.into_any(),
        boards.into_any(),
    ];
    PyList::new(py, items)
}

/// The list form of a record: `[R, oldest, {game: {match: (points, played_at)}}, {game:
/// {board: aggregate}}]` (`state.board_rules.PlayerRecord`).
#[pyfunction]
fn record_unpack<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    with_record(&held(record)?, |r| list_form(py, r))
}

/// A held record from its list form.
#[pyfunction]
fn record_pack<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let mut out = Record::empty(record.get_item(0)?.extract()?);
    out.oldest = record.get_item(1)?.extract()?;
    for (game, matches) in record.get_item(2)?.cast_into::<PyDict>()?.iter() {
        let mut held = GameResults::new(game.cast::<PyString>()?.to_str()?);
        for (m, pair) in matches.cast::<PyDict>()?.iter() {
            let (points, played_at): (i64, i64) = (pair.get_item(0)?.extract()?, pair.get_item(1)?.extract()?);
            held.put(m.cast::<PyString>()?.to_str()?, points, played_at);
        }
        out.results.push(held);
    }
    for (game, mine) in record.get_item(3)?.cast_into::<PyDict>()?.iter() {
        let mut boards = Vec::new();
        for (name, agg) in mine.cast::<PyDict>()?.iter() {
            let name = name.cast::<PyString>()?.to_str()?.to_owned();
            let board =
                Board::parse(&name).ok_or_else(|| PyValueError::new_err(format!("not a board name: {name:?}")))?;
            let agg: Vec<i64> = agg.extract()?;
            let agg = match (&board, agg.as_slice()) {
                (Board::Best, [best, first]) => Aggregate { score: *best, last: -1, first: *first },
                (Board::Best, _) => return Err(PyValueError::new_err("best holds [best, first]")),
                (_, [score, last, first]) => Aggregate { score: *score, last: *last, first: *first },
                _ => return Err(PyValueError::new_err("a sum board holds [score, last, first]")),
            };
            boards.push((board, agg));
        }
        out.boards.push(GameBoards { game: game.cast::<PyString>()?.to_str()?.into(), boards });
    }
    Ok(Bound::new(py, PyRecord { record: out })?.into_any())
}

/// A single record (a player's one first result) from its fields `(R, game, match, points,
/// played_at)`, as a changelog's packed form holds them.
#[pyfunction]
fn record_single<'py>(
    py: Python<'py>,
    newest: i64,
    game: &str,
    r#match: &str,
    points: i64,
    played_at: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    pack_single(newest, game, r#match, points, played_at)
        .map(|single| PyBytes::new(py, &single))
        .ok_or_else(|| PyValueError::new_err("points out of a single record's range"))
}

/// `(R, game, match, points, played_at)` of a single record, None for a held one.
#[pyfunction]
fn record_fields<'a>(record: &'a Bound<'_, PyAny>) -> PyResult<Option<Fields<'a>>> {
    match held(record)? {
        Held::Single(data) => single_fields(data).map(Some).map_err(bad),
        Held::Object(_) => Ok(None),
    }
}

/// Every `(game_id, board, score, reached_at)` of a record.
#[pyfunction]
fn record_standings<'py>(py: Python<'py>, record: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    with_record(&held(record)?, |held| {
        let out = PyList::empty(py);
        for (game, board, agg) in held.aggregates() {
            let (score, reached_at) = agg.standing(board);
            out.append((game, board.name(), score, reached_at))?;
        }
        Ok(out)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BoardRules>()?;
    m.add_class::<PyRecord>()?;
    m.add_function(wrap_pyfunction!(record_unpack, m)?)?;
    m.add_function(wrap_pyfunction!(record_pack, m)?)?;
    m.add_function(wrap_pyfunction!(record_single, m)?)?;
    m.add_function(wrap_pyfunction!(record_fields, m)?)?;
    m.add_function(wrap_pyfunction!(record_standings, m)?)?;
    Ok(())
}
