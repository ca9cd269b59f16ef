//! The board partition's table ([`crate::board_table`]) in `rankflow._native`: a call's
//! entries in as the bytes `board_partitions` made of the per-player stage's tuples (the form
//! that crosses between processes), read without a Python object made but a player's id; an
//! epoch's report out as the dicts the merger joins. `operators/board_counter.py` is the
//! typed boundary the flow calls.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::board_table::{put_change, put_player, Entries, Held, Table};
use crate::crc::crc32;

/// One board partition: per board its best `k_max` entries, its players here and the open
/// epoch's entries (docs/design.md, "The board counters in the kernel").
#[pyclass(module = "rankflow._native", name = "BoardTable")]
struct PyBoardTable {
    /// Player ids are held as the Python strings the entries came with: a report hands
    /// them back, so no string is made again.
    table: Table<Py<PyString>>,
}

fn top_list<'py>(py: Python<'py>, entries: &[Held<Py<PyString>>], k: usize) -> PyResult<Bound<'py, PyList>> {
    let items = entries.iter().take(k).map(|h| (h.handle.bind(py), h.score, h.reached_at));
    PyList::new(py, items)
}

fn handle(py: Python<'_>) -> impl Fn(&str) -> Py<PyString> + '_ {
    move |id| PyString::new(py, id).unbind()
}

#[pymethods]
impl PyBoardTable {
    /// An empty table, or one from the bytes of [`PyBoardTable::state`].
    #[new]
    #[pyo3(signature = (k_max, state=None))]
    fn new(py: Python<'_>, k_max: usize, state: Option<&[u8]>) -> PyResult<Self> {
        let table = match state {
            None => Table::new(k_max),
            Some(data) => Table::from_state(k_max, data, handle(py))
                .map_err(|_| PyValueError::new_err("not a board partition's recovery state"))?,
        };
        Ok(PyBoardTable { table })
    }

    /// A call's entries for this partition as bytes (`board_partitions`): read without a
    /// Python object made but each player's id (the report hands it back).
    fn stage(&mut self, py: Python<'_>, entries: &[u8]) -> PyResult<()> {
        let hold = |id: &str| PyString::new(py, id);
        self.table
            .stage_entries(entries, hold, |player| player.clone().unbind())
            .map_err(|_| PyValueError::new_err("not a call's board entries"))
    }

    /// Close the open epoch: `(boards, entries, errors)`. `dropped(game_id, boards)` names the
    /// boards of a changed game that retention drops (forgotten here). `boards`: per changed
    /// board still held `(its top k_max or None when unchanged, players here)`; `entries`:
    /// per changed board `{player_id: (score, reached_at)}`, the dropped ones' too.
    #[allow(clippy::type_complexity)]
    fn close<'py>(
        &mut self,
        py: Python<'py>,
        dropped: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let closed = self.table.close(|game, boards| dropped.call1((game, boards))?.extract::<Vec<String>>())?;
        let boards = PyDict::new(py);
        let entries = PyDict::new(py);
        for board in closed {
            let bid = PyTuple::new(py, [PyString::new(py, &board.game), PyString::new(py, &board.board)])?;
            let mine = PyDict::new(py);
            for (player, score, reached_at) in board.entries {
                mine.set_item(player, (score, reached_at))?;
            }
            entries.set_item(&bid, mine)?;
            if board.kept {
                let top = match board.top_changed {
                    true => {
                        let held = self.table.top(&board.game, &board.board).expect("a kept board");
                        top_list(py, held.entries(), self.table.k_max())?.into_any()
                    }
                    false => py.None().into_bound(py),
                };
                boards.set_item(bid, (top, board.players))?;
            }
        }
        let errors = PyList::new(py, std::mem::take(&mut self.table.errors))?;
        Ok((boards, entries, errors))
    }

    /// The recovery state: compact bytes (`native/src/board_table.rs`, `STATE_MAGIC`).
    fn state<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        // an id read at stage is UTF-8 (`to_str`), so nothing is lost here
        PyBytes::new(py, &self.table.state(|player| player.bind(py).to_string_lossy().into_owned()))
    }

    /// A board from a recovery state of the Python form: its top entries and player count.
    fn resume_top(
        &mut self,
        game: &str,
        board: &str,
        entries: Vec<(Bound<'_, PyString>, i64, i64)>,
        players: u64,
    ) -> PyResult<()> {
        let mut held = Vec::with_capacity(entries.len());
        for (player, score, reached_at) in entries {
            held.push(Held { id: player.to_str()?.into(), score, reached_at, handle: player.unbind() });
        }
        self.table.resume_top(game, board, held, players);
        Ok(())
    }

    /// A board's open-epoch entries from a recovery state of the Python form.
    fn resume_open(&mut self, game: &str, board: &str, entries: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut open = Vec::with_capacity(entries.len());
        for (player, entry) in entries.iter() {
            let (score, reached_at): (i64, i64) = entry.extract()?;
            open.push((player.cast_into::<PyString>()?.unbind(), score, reached_at));
        }
        self.table.resume_open(game, board, open);
        Ok(())
    }

    /// The boards held, as `(game_id, board)`.
    fn boards(&self) -> Vec<(String, String)> {
        let games = self.table.games.iter();
        games.flat_map(|(game, boards)| boards.keys().map(move |board| (game.clone(), board.clone()))).collect()
    }

    /// A board's first `k` entries `(player_id, score, reached_at)` (empty if not held).
    fn top<'py>(&self, py: Python<'py>, game: &str, board: &str, k: usize) -> PyResult<Bound<'py, PyList>> {
        match self.table.top(game, board) {
            Some(top) => top_list(py, top.entries(), k),
            None => Ok(PyList::empty(py)),
        }
    }

    /// Raise unless every board's top holds its invariants (the property tests).
    fn _check(&self) -> PyResult<()> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.table.check()))
            .map_err(|_| PyValueError::new_err("a board's top broke its invariants"))
    }
}

/// A call's entries `[(player_id, ((game_id, board, score, reached_at, new), ...)), ...]` by
/// board partition, `crc32(player_id) % partitions` (zlib's CRC-32 of the UTF-8 id):
/// `[(partition, entries), ...]` for the partitions that get some, each the bytes
/// `BoardTable.stage` reads (`board_table::put_player`), in the call's order.
#[pyfunction]
fn board_partitions<'py>(
    py: Python<'py>,
    entries: &Bound<'py, PyList>,
    partitions: u32,
) -> PyResult<Vec<(u32, Bound<'py, PyBytes>)>> {
    if partitions == 0 {
        return Err(PyValueError::new_err("partitions must be >= 1"));
    }
    let mut blobs: Vec<Vec<u8>> = vec![Vec::new(); partitions as usize];
    for item in entries.iter() {
        let item = item.cast::<PyTuple>()?;
        let player = item.get_borrowed_item(0)?;
        let player = player.cast::<PyString>()?;
        let id = player.to_str()?;
        let out = &mut blobs[(crc32(id.as_bytes()) % partitions) as usize];
        let changes = item.get_borrowed_item(1)?;
        let changes = changes.cast::<PyTuple>()?;
        put_player(out, id, changes.len());
        for change in changes.iter_borrowed() {
            let change = change.cast::<PyTuple>()?;
            let game = change.get_borrowed_item(0)?;
            let board = change.get_borrowed_item(1)?;
            put_change(
                out,
                game.cast::<PyString>()?.to_str()?,
                board.cast::<PyString>()?.to_str()?,
                change.get_borrowed_item(2)?.extract()?,
                change.get_borrowed_item(3)?.extract()?,
                change.get_borrowed_item(4)?.is_truthy()?,
            );
        }
    }
    let blobs = blobs.into_iter().enumerate().filter(|(_, blob)| !blob.is_empty());
    Ok(blobs.map(|(p, blob)| (p as u32, PyBytes::new(py, &blob))).collect())
}

/// The entries of [`board_partitions`]'s bytes as the per-player stage made them (the tests read
/// what crossed with it).
#[pyfunction]
fn board_entries<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let bad = |_| PyValueError::new_err("not a call's board entries");
    let out = PyList::empty(py);
    let mut entries = Entries::new(data);
    while let Some((player, n)) = entries.player().map_err(bad)? {
        let mut changes = Vec::with_capacity(n.min(64) as usize);
        for _ in 0..n {
            let c = entries.change().map_err(bad)?;
            changes.push((c.game, c.board, c.score, c.reached_at, c.new).into_pyobject(py)?);
        }
        out.append((player, PyTuple::new(py, changes)?))?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBoardTable>()?;
    m.add_function(wrap_pyfunction!(board_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(board_entries, m)?)
}
