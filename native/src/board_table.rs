//! A board partition's table (the boards flow's counter stage, `operators/board_counter.py`):
//! per board the partition's best `K_max` entries, its player count and the open epoch's
//! entries, newest per player. Pure Rust: [`crate::board_table_python`] is its Python face.
//!
//! A board's entries only improve (a total grows, a best rises, `reached_at` only gets
//! earlier at an equal score: docs/semantics/boards.md 3 and 4), so an entry pushed out of a
//! partition's top never comes back by itself, only with the change that improves it: the
//! [`Top`] holds `capacity` entries and is exact. Its order is the contract's: score
//! descending, then `reached_at` ascending, then id ascending (byte order of UTF-8, which is
//! Python's code point order).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fx hashing (as rustc's): a multiply and a rotate per 8 bytes. The table's maps are keyed
/// by short ids and names, hashed at every entry; SipHash, std's default against flooding,
/// cost a tenth of the stage here, and these maps are bounded (a top holds `K_max` ids).
#[derive(Clone, Copy, Default)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// One held entry of a [`Top`], ordered best first; `handle` is the caller's form of its id
/// (the Python string, so a report makes none).
#[derive(Clone, Debug)]
pub struct Held<P> {
    pub id: Box<str>,
    pub score: i64,
    pub reached_at: i64,
    pub handle: P,
}

impl<P> Held<P> {
    /// This entry's place against `(score, reached_at, id)`: Less when it ranks first.
    fn cmp_to(&self, score: i64, reached_at: i64, id: &str) -> Ordering {
        score.cmp(&self.score).then(self.reached_at.cmp(&reached_at)).then_with(|| (*self.id).cmp(id))
    }
}

/// The best `capacity` entries of a table whose entries only improve. An offer below a
/// full top costs one comparison and one lookup; into it O(log K) comparisons and an O(K) move.
#[derive(Debug)]
pub struct Top<P> {
    capacity: usize,
    index: Vec<Held<P>>,
    keys: FxMap<Box<str>, (i64, i64)>,
    /// Whether the top changed since the owner last cleared it.
    pub changed: bool,
}

impl<P> Top<P> {
    pub fn new(capacity: usize) -> Self {
        Top { capacity: capacity.max(1), index: Vec::new(), keys: FxMap::default(), changed: false }
    }

    fn floor(&self) -> Option<&Held<P>> {
        if self.index.len() >= self.capacity {
            self.index.last()
        } else {
            None
        }
    }

    fn position(&self, score: i64, reached_at: i64, id: &str) -> Result<usize, usize> {
        self.index.binary_search_by(|held| held.cmp_to(score, reached_at, id))
    }

    /// Take the entry's new value; false (and nothing changes) if it is worse than the one
    /// held. `handle` makes the caller's form of the id, only when the entry goes in.
    pub fn offer(&mut self, id: &str, score: i64, reached_at: i64, handle: impl FnOnce() -> P) -> bool {
        if let Some(floor) = self.floor() {
            if score < floor.score && !self.keys.contains_key(id) {
                return true; // below the top: the common case on a big board
            }
        }
        if let Some(&(old_score, old_at)) = self.keys.get(id) {
            match old_score.cmp(&score).then(reached_at.cmp(&old_at)) {
                Ordering::Less => {}
                same_or_worse => return same_or_worse == Ordering::Equal,
            }
            let at = self.position(old_score, old_at, id).expect("a held id is in the index");
            self.index.remove(at);
        } else if let Some(floor) = self.floor() {
            if floor.cmp_to(score, reached_at, id) == Ordering::Less {
                return true; // below the top (an equal key cannot be: ids are unique)
            }
            let out = self.index.pop().expect("a full top");
            self.keys.remove(&out.id);
        }
        let at = self.position(score, reached_at, id).unwrap_or_else(|at| at);
        let id: Box<str> = id.into();
        self.keys.insert(id.clone(), (score, reached_at));
        self.index.insert(at, Held { id, score, reached_at, handle: handle() });
        self.changed = true;
        true
    }

    /// The held entries, best first.
    pub fn entries(&self) -> &[Held<P>] {
        &self.index
    }

    /// Panic unless the invariants hold: strictly ascending, at most `capacity`, the id map
    /// the same as the index.
    pub fn check(&self) {
        let ordered = self.index.windows(2).all(|w| w[0].cmp_to(w[1].score, w[1].reached_at, &w[1].id).is_lt());
        assert!(ordered, "held entries strictly in order");
        assert!(self.index.len() <= self.capacity, "at most capacity entries");
        assert_eq!(self.keys.len(), self.index.len(), "the id map holds the held entries");
        for held in &self.index {
            assert_eq!(self.keys.get(&held.id), Some(&(held.score, held.reached_at)), "the id map agrees");
        }
    }
}

/// One board in one partition.
#[derive(Debug)]
pub struct Board<P> {
    pub top: Top<P>,
    /// Players of the board whose entries this partition holds.
    pub players: u64,
    /// The open epoch's entries in arrival order: a player's last is its newest (a report
    /// keeps it, as a dict filled in this order does).
    pub entries: Vec<(P, i64, i64)>,
}

impl<P> Board<P> {
    fn new(capacity: usize) -> Self {
        Board { top: Top::new(capacity), players: 0, entries: Vec::new() }
    }
}

/// A board changed in the epoch that closed: its entries, and unless retention dropped it
/// just now (`kept`), whether its top changed and its players here.
pub struct Closed<P> {
    pub game: String,
    pub board: String,
    pub entries: Vec<(P, i64, i64)>,
    pub kept: bool,
    pub top_changed: bool,
    pub players: u64,
}

/// One board partition: every board it holds, by game. `P` is the caller's form of a
/// player id (the Python string: entries and tops hand back the objects they were given).
#[derive(Debug)]
pub struct Table<P> {
    k_max: usize,
    pub games: FxMap<String, FxMap<String, Board<P>>>,
    /// Boards with entries in the open epoch, in the order they got their first.
    changed: Vec<(String, String)>,
    pub errors: Vec<String>,
}

impl<P> Table<P> {
    pub fn new(k_max: usize) -> Self {
        Table { k_max, games: FxMap::default(), changed: Vec::new(), errors: Vec::new() }
    }

    pub fn k_max(&self) -> usize {
        self.k_max
    }

    fn board(&mut self, game: &str, board: &str) -> &mut Board<P> {
        if !self.games.contains_key(game) {
            self.games.insert(game.to_owned(), FxMap::default());
        }
        let boards = self.games.get_mut(game).expect("just made");
        if !boards.contains_key(board) {
            boards.insert(board.to_owned(), Board::new(self.k_max));
        }
        boards.get_mut(board).expect("just made")
    }

    /// One change of the per-player stage: the player's entry on `(game, board)` now
    /// (`new`: the player joins the board); `player` is the id, `handle` makes its caller's form.
    #[allow(clippy::too_many_arguments)]
    pub fn stage(
        &mut self,
        player: &str,
        handle: impl Fn() -> P,
        game: &str,
        board: &str,
        score: i64,
        reached_at: i64,
        new: bool,
    ) {
        let held = self.board(game, board);
        if new {
            held.players += 1;
        }
        let better = held.top.offer(player, score, reached_at, &handle);
        let first = held.entries.is_empty();
        held.entries.push((handle(), score, reached_at));
        if !better {
            self.errors.push(format!("entry got worse: {player} on {game}/{board} -> {score} at {reached_at}"));
        }
        if first {
            self.changed.push((game.to_owned(), board.to_owned()));
        }
    }

    /// A call's entries for this partition as [`put_player`] and [`put_change`] wrote them:
    /// `hold(id)` makes a player's form once, `handle` a copy of it for each place that keeps
    /// one. Bytes of another form are refused (the entries before the fault are staged).
    pub fn stage_entries<H>(
        &mut self,
        data: &[u8],
        mut hold: impl FnMut(&str) -> H,
        handle: impl Fn(&H) -> P,
    ) -> Result<(), BadState> {
        let mut entries = Entries::new(data);
        while let Some((player, changes)) = entries.player()? {
            let held = hold(player);
            for _ in 0..changes {
                let c = entries.change()?;
                self.stage(player, || handle(&held), c.game, c.board, c.score, c.reached_at, c.new);
            }
        }
        Ok(())
    }

    /// Close the open epoch: forget the boards retention drops (`dropped(game, its boards)`
    /// names them, for each game changed) and hand over every changed board's entries.
    pub fn close<E>(
        &mut self,
        mut dropped: impl FnMut(&str, Vec<&str>) -> Result<Vec<String>, E>,
    ) -> Result<Vec<Closed<P>>, E> {
        let changed = std::mem::take(&mut self.changed);
        let mut games: Vec<&str> = Vec::new();
        for (game, _) in &changed {
            if !games.contains(&game.as_str()) {
                games.push(game);
            }
        }
        let mut gone: Vec<(String, String, Board<P>)> = Vec::new();
        for game in games {
            let boards = self.games.get_mut(game).expect("a changed game is held");
            for board in dropped(game, boards.keys().map(String::as_str).collect())? {
                if let Some(held) = boards.remove(&board) {
                    gone.push((game.to_owned(), board, held));
                }
            }
        }
        let mut out = Vec::with_capacity(changed.len());
        for (game, board) in changed {
            let held = self.games.get_mut(&game).and_then(|boards| boards.get_mut(&board));
            match held {
                Some(held) => {
                    let entries = std::mem::take(&mut held.entries);
                    let top_changed = std::mem::take(&mut held.top.changed);
                    out.push(Closed { game, board, entries, kept: true, top_changed, players: held.players });
                }
                None => {
                    let at = gone.iter().position(|(g, b, _)| *g == game && *b == board).expect("dropped now");
                    let (_, _, held) = gone.swap_remove(at);
                    out.push(Closed {
                        game,
                        board,
                        entries: held.entries,
                        kept: false,
                        top_changed: false,
                        players: 0,
                    });
                }
            }
        }
        Ok(out)
    }

    pub fn top(&self, game: &str, board: &str) -> Option<&Top<P>> {
        self.games.get(game).and_then(|boards| boards.get(board)).map(|held| &held.top)
    }

    /// A board held from a recovery state: its top entries (offered again, so a smaller
    /// `K_max` keeps their best) and its player count. Its top counts as changed: the open
    /// epoch may have changed it before the state was taken, and its report must say so.
    pub fn resume_top(&mut self, game: &str, board: &str, entries: Vec<Held<P>>, players: u64) {
        let held = self.board(game, board);
        held.top = Top::new(held.top.capacity);
        for entry in entries {
            let handle = entry.handle;
            held.top.offer(&entry.id, entry.score, entry.reached_at, || handle);
        }
        held.players = players;
    }

    /// A board's open-epoch entries from a recovery state (applied to its top already).
    pub fn resume_open(&mut self, game: &str, board: &str, entries: Vec<(P, i64, i64)>) {
        if entries.is_empty() {
            return;
        }
        let held = self.board(game, board);
        let first = held.entries.is_empty();
        held.entries.extend(entries);
        if first {
            self.changed.push((game.to_owned(), board.to_owned()));
        }
    }

    /// The recovery state as bytes (see [`STATE_MAGIC`]); `id` reads a handle's id.
    pub fn state(&self, id: impl Fn(&P) -> String) -> Vec<u8> {
        let mut out = STATE_MAGIC.to_vec();
        let count: usize = self.games.values().map(|boards| boards.len()).sum();
        put_uint(&mut out, count as u64);
        for (game, boards) in &self.games {
            for (board, held) in boards {
                put_str(&mut out, game);
                put_str(&mut out, board);
                put_uint(&mut out, held.players);
                put_uint(&mut out, held.top.index.len() as u64);
                for entry in &held.top.index {
                    put_entry(&mut out, &entry.id, entry.score, entry.reached_at);
                }
                put_uint(&mut out, held.entries.len() as u64);
                for (player, score, reached_at) in &held.entries {
                    put_entry(&mut out, &id(player), *score, *reached_at);
                }
            }
        }
        out
    }

    /// A table from [`Table::state`]'s bytes under this run's `K_max`; `handle` makes an id's
    /// caller's form.
    pub fn from_state(k_max: usize, data: &[u8], handle: impl Fn(&str) -> P) -> Result<Self, BadState> {
        let rest = data.strip_prefix(STATE_MAGIC).ok_or(BadState)?;
        let mut reader = Reader { data: rest };
        let mut table = Table::new(k_max);
        for _ in 0..reader.uint()? {
            let game = reader.str()?.to_owned();
            let board = reader.str()?.to_owned();
            let players = reader.uint()?;
            let mut top = Vec::new();
            for _ in 0..reader.uint()? {
                let (id, score, reached_at) = reader.entry()?;
                top.push(Held { id: id.into(), score, reached_at, handle: handle(id) });
            }
            table.resume_top(&game, &board, top, players);
            let mut open = Vec::new();
            for _ in 0..reader.uint()? {
                let (id, score, reached_at) = reader.entry()?;
                open.push((handle(id), score, reached_at));
            }
            table.resume_open(&game, &board, open);
        }
        if !reader.data.is_empty() {
            return Err(BadState);
        }
        Ok(table)
    }

    /// Panic unless every board's top holds its invariants.
    pub fn check(&self) {
        for boards in self.games.values() {
            for held in boards.values() {
                held.top.check();
            }
        }
    }
}

/// The recovery state's first bytes: its format and version. Then the number of boards
/// and per board its game, name, players, top entries and open entries (unsigned LEB128
/// numbers; strings as their length and UTF-8; scores and times zigzag-encoded).
pub const STATE_MAGIC: &[u8] = b"rankflow-board-table-1\n";

/// Bytes that are not a board table's recovery state.
#[derive(Debug, PartialEq, Eq)]
pub struct BadState;

fn put_uint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_int(out: &mut Vec<u8>, n: i64) {
    put_uint(out, ((n << 1) ^ (n >> 63)) as u64);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_entry(out: &mut Vec<u8>, id: &str, score: i64, reached_at: i64) {
    put_str(out, id);
    put_int(out, score);
    put_int(out, reached_at);
}

/// A call's board entries for one partition as bytes: the form they cross between processes in
/// (`_native.board_partitions` writes them, [`Table::stage_entries`] reads them; one bytes
/// object pickles as a copy, a list of tuples item by item). Per player its id and its number
/// of changes ([`put_player`]), then per change ([`put_change`]) the game, the board, the
/// score, `reached_at` and one byte, 1 when the player joins the board; numbers and strings as
/// in the recovery state.
pub fn put_player(out: &mut Vec<u8>, player: &str, changes: usize) {
    put_str(out, player);
    put_uint(out, changes as u64);
}

/// One change of the player [`put_player`] wrote last.
pub fn put_change(out: &mut Vec<u8>, game: &str, board: &str, score: i64, reached_at: i64, new: bool) {
    put_str(out, game);
    put_str(out, board);
    put_int(out, score);
    put_int(out, reached_at);
    out.push(u8::from(new));
}

/// One change read back from a call's entries.
pub struct Change<'a> {
    pub game: &'a str,
    pub board: &'a str,
    pub score: i64,
    pub reached_at: i64,
    pub new: bool,
}

/// A reader of a call's entries ([`put_player`]): a player, then as many [`Entries::change`]s
/// as it said.
pub struct Entries<'a> {
    reader: Reader<'a>,
}

impl<'a> Entries<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Entries { reader: Reader { data } }
    }

    /// The next player's id and number of changes; None at the end.
    pub fn player(&mut self) -> Result<Option<(&'a str, u64)>, BadState> {
        if self.reader.data.is_empty() {
            return Ok(None);
        }
        Ok(Some((self.reader.str()?, self.reader.uint()?)))
    }

    pub fn change(&mut self) -> Result<Change<'a>, BadState> {
        let r = &mut self.reader;
        let (game, board, score, reached_at) = (r.str()?, r.str()?, r.int()?, r.int()?);
        let (&new, rest) = r.data.split_first().ok_or(BadState)?;
        r.data = rest;
        if new > 1 {
            return Err(BadState);
        }
        Ok(Change { game, board, score, reached_at, new: new == 1 })
    }
}

struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn uint(&mut self) -> Result<u64, BadState> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.data.split_first().ok_or(BadState)?;
            self.data = rest;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(n);
            }
        }
        Err(BadState)
    }

    fn int(&mut self) -> Result<i64, BadState> {
        let n = self.uint()?;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn str(&mut self) -> Result<&'a str, BadState> {
        let len = usize::try_from(self.uint()?).map_err(|_| BadState)?;
        if len > self.data.len() {
            return Err(BadState);
        }
        let (text, rest) = self.data.split_at(len);
        self.data = rest;
        std::str::from_utf8(text).map_err(|_| BadState)
    }

    fn entry(&mut self) -> Result<(&'a str, i64, i64), BadState> {
        Ok((self.str()?, self.int()?, self.int()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(top: &Top<()>) -> Vec<(&str, i64, i64)> {
        top.entries().iter().map(|h| (&*h.id, h.score, h.reached_at)).collect()
    }

    #[test]
    fn a_top_keeps_the_best_and_refuses_a_worse_entry() {
        let mut top = Top::new(2);
        for (id, score, at) in [("ana", 50, 10), ("bo", 50, 5), ("cy", 70, 9)] {
            assert!(top.offer(id, score, at, || ()));
        }
        assert_eq!(ids(&top), [("cy", 70, 9), ("bo", 50, 5)]);
        assert!(top.offer("ana", 80, 11, || ()));
        assert_eq!(ids(&top), [("ana", 80, 11), ("cy", 70, 9)]);
        assert!(!top.offer("ana", 79, 1, || ()), "worse");
        assert!(top.offer("ana", 80, 11, || ()), "the same");
        assert!(top.offer("al", 70, 9, || ()), "ties below the floor by id");
        assert_eq!(ids(&top), [("ana", 80, 11), ("al", 70, 9)]);
        top.check();
    }

    fn stage(table: &mut Table<Box<str>>, player: &str, board: &str, score: i64, at: i64) {
        table.stage(player, || player.into(), "g", board, score, at, true);
    }

    #[test]
    fn a_state_round_trips_and_refuses_other_bytes() {
        let mut table = Table::new(2);
        stage(&mut table, "ana", "all", 5, 10);
        stage(&mut table, "bo", "all", -3, 11);
        stage(&mut table, "cy", "daily:2027-01-01", 7, 1);
        let closed = table.close(|_, _| Ok::<_, ()>(vec![])).unwrap();
        assert_eq!(closed.len(), 2);
        stage(&mut table, "dee", "all", 9, 12);
        let data = table.state(|id| id.to_string());
        let back = Table::from_state(2, &data, |id: &str| Box::<str>::from(id)).unwrap();
        assert_eq!(back.state(|id| id.to_string()).len(), data.len());
        let top = back.top("g", "all").unwrap().entries();
        assert_eq!(top.iter().map(|h| (&*h.handle, h.score)).collect::<Vec<_>>(), [("dee", 9), ("ana", 5)]);
        assert_eq!(back.changed, [("g".to_owned(), "all".to_owned())]);
        assert_eq!(Table::from_state(2, b"junk", |id: &str| Box::<str>::from(id)).unwrap_err(), BadState);
        assert_eq!(
            Table::from_state(2, &data[..data.len() - 1], |id: &str| Box::<str>::from(id)).unwrap_err(),
            BadState
        );
    }

    #[test]
    fn entries_as_bytes_stage_as_the_changes_did_and_other_bytes_are_refused() {
        let mut data = Vec::new();
        put_player(&mut data, "ana", 2);
        put_change(&mut data, "g", "all", -5, 10, true);
        put_change(&mut data, "g", "best", 7, 11, false);
        put_player(&mut data, "bo", 1);
        put_change(&mut data, "g", "all", 3, 12, true);
        let (mut table, mut direct) = (Table::<Box<str>>::new(2), Table::<Box<str>>::new(2));
        table.stage_entries(&data, |id: &str| Box::<str>::from(id), |id| id.clone()).unwrap();
        stage(&mut direct, "ana", "all", -5, 10);
        direct.stage("ana", || "ana".into(), "g", "best", 7, 11, false);
        stage(&mut direct, "bo", "all", 3, 12);
        assert_eq!(table.state(|id| id.to_string()), direct.state(|id| id.to_string()));
        let mut read = Entries::new(&data);
        assert_eq!(read.player().unwrap(), Some(("ana", 2)));
        let c = read.change().unwrap();
        assert_eq!((c.game, c.board, c.score, c.reached_at, c.new), ("g", "all", -5, 10, true));
        for bad in [&data[..data.len() - 1], b"\x03ana\x01\x01g"] {
            assert_eq!(
                Table::<Box<str>>::new(2).stage_entries(bad, |id: &str| Box::<str>::from(id), |id| id.clone()),
                Err(BadState)
            );
        }
    }

    #[test]
    fn retention_drops_a_board_but_hands_over_its_entries() {
        let mut table = Table::new(2);
        stage(&mut table, "ana", "daily:2027-01-01", 5, 1);
        stage(&mut table, "ana", "all", 5, 1);
        let daily = |_: &str, boards: Vec<&str>| {
            Ok::<_, ()>(boards.into_iter().filter(|b| b.starts_with("daily")).map(str::to_owned).collect())
        };
        let closed = table.close(daily).unwrap();
        let dropped: Vec<_> = closed.iter().filter(|c| !c.kept).map(|c| c.board.as_str()).collect();
        assert_eq!(dropped, ["daily:2027-01-01"]);
        assert!(closed.iter().all(|c| c.entries.len() == 1));
        assert!(table.top("g", "daily:2027-01-01").is_none());
    }
}
