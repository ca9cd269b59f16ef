//! A player shard's changes ([`crate::changes`]) in `rankflow._native`: `PlayerChanges`, which
//! `BoardRules.apply` notes each result into, and whose `frame` is a barrier's changelog frame;
//! `board_image`, a shard's image. Both write bytes from the kernel's records, no Python object
//! per player (`operators/player_stage.py`, `connectors/changelog.py`).

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::board_table::FxMap;
use crate::changes::{write_record, write_single, write_str, Noted};
use crate::rules_python::PyRecord;

/// The players of a shard that changed since the last barrier, and what changed in each.
#[pyclass(module = "rankflow._native")]
#[derive(Default)]
pub(crate) struct PlayerChanges {
    index: FxMap<Box<str>, usize>,
    players: Vec<(Py<PyString>, Noted)>,
}

impl PlayerChanges {
    /// The player's changes, noted from now on (the player's id object is kept: the frame looks
    /// the record up with it, making no string).
    pub(crate) fn noted(&mut self, player: &Bound<'_, PyString>) -> PyResult<&mut Noted> {
        let key = player.to_str()?;
        let at = match self.index.get(key) {
            Some(&at) => at,
            None => {
                let at = self.players.len();
                self.index.insert(key.into(), at);
                self.players.push((player.clone().unbind(), Noted::default()));
                at
            }
        };
        Ok(&mut self.players[at].1)
    }
}

fn write_stored(out: &mut Vec<u8>, record: &Bound<'_, PyAny>, noted: Option<&Noted>) -> PyResult<()> {
    if let Ok(bytes) = record.cast::<PyBytes>() {
        return write_single(out, bytes.as_bytes())
            .map_err(|_| PyValueError::new_err("not a player record of the board rules"));
    }
    let held = record.cast::<PyRecord>()?.borrow();
    match noted {
        Some(noted) if !noted.whole => noted.write_piece(out, &held.record),
        _ => write_record(out, &held.record),
    }
    Ok(())
}

#[pymethods]
impl PlayerChanges {
    #[new]
    fn new() -> Self {
        PlayerChanges::default()
    }

    fn __len__(&self) -> usize {
        self.players.len()
    }

    /// The next frame writes the player's record whole (records resumed from a form that earlier
    /// code stored).
    fn mark_whole(&mut self, player: &Bound<'_, PyString>) -> PyResult<()> {
        self.noted(player)?.set_whole();
        Ok(())
    }

    /// Whether the next frame writes the player's record whole; None: it has not changed.
    fn whole(&self, player: &str) -> Option<bool> {
        self.index.get(player).map(|&at| self.players[at].1.whole)
    }

    /// The changes forgotten (a frame made elsewhere holds them).
    fn clear(&mut self) {
        self.index.clear();
        self.players.clear();
    }

    /// The barrier's changelog frame, JSON `{player: piece or stored record}` of the players that
    /// changed (their records looked up in `records`), empty bytes when none did; the changes
    /// are forgotten.
    fn frame<'py>(&mut self, py: Python<'py>, records: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyBytes>> {
        if self.players.is_empty() {
            return Ok(PyBytes::new(py, b""));
        }
        let mut out = Vec::with_capacity(self.players.len() * 192);
        out.push(b'{');
        for (i, (player, noted)) in self.players.iter().enumerate() {
            let player = player.bind(py);
            let Some(record) = records.get_item(player)? else {
                return Err(PyKeyError::new_err(player.clone().unbind()));
            };
            if i > 0 {
                out.push(b',');
            }
            write_str(&mut out, player.to_str()?);
            out.push(b':');
            write_stored(&mut out, &record, Some(noted))?;
        }
        out.push(b'}');
        self.clear();
        Ok(PyBytes::new(py, &out))
    }
}

/// A player shard's image: JSON `{player: stored record}` of every record in `records`.
#[pyfunction]
fn board_image<'py>(py: Python<'py>, records: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(records.len() * 192 + 2);
    out.push(b'{');
    for (i, (player, record)) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(&mut out, player.cast::<PyString>()?.to_str()?);
        out.push(b':');
        write_stored(&mut out, &record, None)?;
    }
    out.push(b'}');
    Ok(PyBytes::new(py, &out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PlayerChanges>()?;
    m.add_function(wrap_pyfunction!(board_image, m)?)?;
    Ok(())
}
