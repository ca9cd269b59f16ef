//! The score boards' per-player rules (docs/semantics/boards.md sections 1 checks 7-8, 2,
//! 3, 4 and 7 as they apply to one player, and 9's seasons) over a player's record.
//!
//! This is the one runtime implementation: `state/board_rules.py` is its typed Python
//! boundary, and the reference model in `tests/boards_model.py` is the oracle the
//! property tests hold it to. A record is what the Python list form
//! `[R, oldest, {game: {match: (points, played_at)}}, {game: {board: aggregate}}]` says,
//! held one of two ways:
//!
//! - **single** bytes (a player's one accepted first result, most players of a big board):
//!   `R i64, played_at i64, points u16, game length u16, game, match` (little-endian),
//!   its aggregates those of that one result;
//! - a [`Record`]: each game's results in arrival order with an index by match (a heavy
//!   player's event costs the same as a light one's), and its boards' aggregates.

use std::collections::HashMap;
use std::fmt::Write;

pub const DAY_MS: i64 = 86_400_000;
pub const FUTURE_MS: i64 = 60_000;
pub const KEPT_DAYS: i32 = 7;
pub const NONE_HELD: i64 = 1 << 62;
pub const FORGET_SLACK_MS: i64 = DAY_MS / 4;
/// A player's boards in one game that can all still be kept: all, best, 8 days, 2 weeks.
const MOST_BOARDS: usize = 2 + (KEPT_DAYS as usize + 1) + 2;
const HEAD: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Duplicate,
    TooOld,
    InFuture,
    Conflict,
}

/// A board of a game: `daily` and `weekly` by the day number of their date and of their
/// week's Monday (days since 1970-01-01).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Board {
    All,
    Best,
    Daily(i32),
    Weekly(i32),
    Season(Box<str>),
}

/// `[score, last, first]` of a sum board or `[best, first]` of `best` (`last` unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aggregate {
    pub score: i64,
    pub last: i64,
    pub first: i64,
}

impl Aggregate {
    /// `(score, reached_at)` of the player on `board` (section 4).
    pub fn standing(&self, board: &Board) -> (i64, i64) {
        match board {
            Board::Best => (self.score, self.first),
            _ if self.score != 0 => (self.score, self.last),
            _ => (self.score, self.first),
        }
    }
}

/// One game's accepted results still held, in arrival order, with an index by match.
#[derive(Clone, Debug, Default)]
pub struct GameResults {
    pub game: Box<str>,
    pub matches: Vec<(Box<str>, i64, i64)>,
    index: HashMap<Box<str>, usize>,
}

impl PartialEq for GameResults {
    fn eq(&self, other: &Self) -> bool {
        self.game == other.game && self.matches == other.matches
    }
}

impl Eq for GameResults {}

impl GameResults {
    pub fn new(game: &str) -> Self {
        GameResults { game: game.into(), matches: Vec::new(), index: HashMap::new() }
    }

    /// `(points, played_at)` of a match held.
    pub fn get(&self, m: &str) -> Option<(i64, i64)> {
        self.index.get(m).map(|&at| (self.matches[at].1, self.matches[at].2))
    }

    /// Where a match is held, if it is (the one lookup [`Record::apply`] makes per result).
    fn position(&self, m: &str) -> Option<usize> {
        self.index.get(m).copied()
    }

    /// Hold a result; one with the same match (out of the window) is replaced where it was.
    pub fn put(&mut self, m: &str, points: i64, played_at: i64) {
        let at = self.position(m);
        self.put_at(at, m, points, played_at);
    }

    /// [`GameResults::put`] once the match's position is known: a replaced result keeps its
    /// match id, so only a new one allocates (its id for the index and for the list).
    fn put_at(&mut self, at: Option<usize>, m: &str, points: i64, played_at: i64) {
        match at {
            Some(at) => {
                let held = &mut self.matches[at];
                held.1 = points;
                held.2 = played_at;
            }
            None => {
                self.index.insert(m.into(), self.matches.len());
                self.matches.push((m.into(), points, played_at));
            }
        }
    }

    /// Drop the results played before `cut`; the least played_at left (NONE_HELD: none).
    ///
    /// The index keeps its keys and learns their new positions (a result's position only
    /// moves down by the dropped ones before it): rebuilding it cloned and freed every match
    /// id left, a tenth of the player stage in a long backlog.
    fn forget(&mut self, cut: i64) -> i64 {
        if self.matches.iter().all(|(_, _, played_at)| *played_at >= cut) {
            return self.matches.iter().map(|(_, _, played_at)| *played_at).min().unwrap_or(NONE_HELD);
        }
        let mut kept = 0;
        let mut moved = vec![usize::MAX; self.matches.len()]; // old position -> new (MAX: dropped)
        for (at, (_, _, played_at)) in self.matches.iter().enumerate() {
            if *played_at >= cut {
                moved[at] = kept;
                kept += 1;
            }
        }
        self.matches.retain(|(_, _, played_at)| *played_at >= cut);
        self.index.retain(|_, at| {
            *at = moved[*at];
            *at != usize::MAX
        });
        self.matches.iter().map(|(_, _, played_at)| *played_at).min().unwrap_or(NONE_HELD)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameBoards {
    pub game: Box<str>,
    pub boards: Vec<(Board, Aggregate)>,
}

/// A player's record (the list form's four parts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub r: i64,
    pub oldest: i64,
    pub results: Vec<GameResults>,
    pub boards: Vec<GameBoards>,
}

/// A changed standing of the player on a board of the result's game.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub board: Board,
    pub score: i64,
    pub reached_at: i64,
    pub new: bool,
}

/// A season as the rules take it: its board's name after `season:`, played_at in [start, end).
#[derive(Clone, Debug)]
pub struct Span {
    pub name: String,
    pub start: i64,
    pub end: i64,
}

#[derive(Debug, PartialEq, Eq)]
pub struct BadRecord;

// -- the calendar (section 3) -------------------------------------------------------

/// `(year, month, day)` of a day number (proleptic Gregorian, H. Hinnant's algorithm).
pub fn civil(day: i32) -> (i32, u32, u32) {
    let z = i64::from(day) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

/// The day number of a date.
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i32 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) as i32
}

/// The Monday of a day's ISO week.
pub fn monday(day: i32) -> i32 {
    day - (day + 3).rem_euclid(7)
}

/// The ISO 8601 `(year, week)` of the week starting on `monday`.
pub fn iso_week(monday: i32) -> (i32, i32) {
    let thursday = monday + 3;
    let year = civil(thursday).0;
    (year, (thursday - days_from_civil(year, 1, 1)) / 7 + 1)
}

pub fn day_of(played_at: i64) -> i32 {
    played_at.div_euclid(DAY_MS) as i32
}

impl Board {
    /// The board's name as the flow and Redis spell it.
    pub fn name(&self) -> String {
        let mut out = String::with_capacity(18);
        match self {
            Board::All => out.push_str("all"),
            Board::Best => out.push_str("best"),
            Board::Daily(day) => {
                let (y, m, d) = civil(*day);
                write!(out, "daily:{y:04}-{m:02}-{d:02}").expect("a String takes any write");
            }
            Board::Weekly(monday) => {
                let (y, w) = iso_week(*monday);
                write!(out, "weekly:{y:04}-W{w:02}").expect("a String takes any write");
            }
            Board::Season(name) => {
                out.push_str("season:");
                out.push_str(name);
            }
        }
        out
    }

    /// A board from its name (`all`, `best`, `daily:YYYY-MM-DD`, `weekly:YYYY-Www`, `season:NAME`).
    pub fn parse(name: &str) -> Option<Board> {
        let num = |s: &str| -> Option<i32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        match name {
            "all" => Some(Board::All),
            "best" => Some(Board::Best),
            _ => {
                if let Some(date) = name.strip_prefix("daily:") {
                    if date.len() != 10 || date.get(4..5)? != "-" || date.get(7..8)? != "-" {
                        return None;
                    }
                    let (y, m, d) = (num(date.get(..4)?)?, num(date.get(5..7)?)? as u32, num(date.get(8..)?)? as u32);
                    let day = days_from_civil(y, m, d);
                    (civil(day) == (y, m, d)).then_some(Board::Daily(day))
                } else if let Some(week) = name.strip_prefix("weekly:") {
                    if week.len() != 8 || week.get(4..6)? != "-W" {
                        return None;
                    }
                    let (y, w) = (num(week.get(..4)?)?, num(week.get(6..)?)?);
                    let monday = monday(days_from_civil(y, 1, 4)) + 7 * (w - 1);
                    (w >= 1 && iso_week(monday) == (y, w)).then_some(Board::Weekly(monday))
                } else {
                    name.strip_prefix("season:").map(|s| Board::Season(s.into()))
                }
            }
        }
    }
}

// -- a single record --------------------------------------------------------------

/// The fields `(R, game, match, points, played_at)` of a single record.
pub fn single_fields(data: &[u8]) -> Result<(i64, &str, &str, i64, i64), BadRecord> {
    let word = |at: usize| -> Result<i64, BadRecord> {
        Ok(i64::from_le_bytes(data.get(at..at + 8).ok_or(BadRecord)?.try_into().expect("8 bytes")))
    };
    let half = |at: usize| -> Result<u16, BadRecord> {
        Ok(u16::from_le_bytes(data.get(at..at + 2).ok_or(BadRecord)?.try_into().expect("2 bytes")))
    };
    let (newest, played_at, points, size) = (word(0)?, word(8)?, half(16)?, usize::from(half(18)?));
    let game = std::str::from_utf8(data.get(HEAD..HEAD + size).ok_or(BadRecord)?).map_err(|_| BadRecord)?;
    let m = std::str::from_utf8(&data[HEAD + size..]).map_err(|_| BadRecord)?;
    Ok((newest, game, m, i64::from(points), played_at))
}

/// A single record, if its fields fit that layout (else None: a [`Record`] holds them).
pub fn pack_single(newest: i64, game: &str, m: &str, points: i64, played_at: i64) -> Option<Vec<u8>> {
    if !(0..=i64::from(u16::MAX)).contains(&points) || game.len() > usize::from(u16::MAX) {
        return None;
    }
    let mut out = Vec::with_capacity(HEAD + game.len() + m.len());
    out.extend_from_slice(&newest.to_le_bytes());
    out.extend_from_slice(&played_at.to_le_bytes());
    out.extend_from_slice(&(points as u16).to_le_bytes());
    out.extend_from_slice(&(game.len() as u16).to_le_bytes());
    out.extend_from_slice(game.as_bytes());
    out.extend_from_slice(m.as_bytes());
    Some(out)
}

/// The entries of a player's first result (every board new, reached at the result).
fn first_entries(points: i64, played_at: i64) -> Vec<Entry> {
    let day = day_of(played_at);
    [Board::All, Board::Best, Board::Daily(day), Board::Weekly(monday(day))]
        .into_iter()
        .map(|board| Entry { board, score: points, reached_at: played_at, new: true })
        .collect()
}

// -- the rules ------------------------------------------------------------------------

/// What a player's first event does when it is not a single record's: too old, in the
/// future (a record holding only R), or accepted in a season (a [`Record`]).
pub enum First {
    Single(Vec<u8>, Vec<Entry>),
    Held(Record, Verdict, Vec<Entry>),
}

fn in_season(seasons: &[Span], played_at: i64) -> bool {
    seasons.iter().any(|s| s.start <= played_at && played_at < s.end)
}

impl Record {
    pub fn empty(r: i64) -> Self {
        Record { r, oldest: NONE_HELD, results: Vec::new(), boards: Vec::new() }
    }

    /// The record a single one says.
    pub fn from_single(data: &[u8]) -> Result<Self, BadRecord> {
        let (newest, game, m, points, played_at) = single_fields(data)?;
        let mut record = Record::empty(newest);
        record.oldest = played_at;
        let mut results = GameResults::new(game);
        results.put(m, points, played_at);
        record.results.push(results);
        record.enter(game, points, played_at, &[], &mut Vec::new());
        Ok(record)
    }

    /// A player's first event; `grouped`: the run groups its boards (docs/semantics/boards.md
    /// 10), so the record is held (a single one holds no group's boards).
    pub fn first(
        game: &str,
        m: &str,
        points: i64,
        played_at: i64,
        received_at: i64,
        seasons: &[Span],
        grouped: bool,
    ) -> First {
        if !grouped
            && played_at >= received_at - DAY_MS
            && played_at <= received_at + FUTURE_MS
            && !in_season(seasons, played_at)
        {
            if let Some(single) = pack_single(received_at, game, m, points, played_at) {
                return First::Single(single, first_entries(points, played_at));
            }
        }
        let mut record = Record::empty(received_at);
        let (verdict, entries) = record.apply(game, m, points, played_at, received_at, seasons);
        First::Held(record, verdict, entries)
    }

    /// Section 2: drop the results played before `cut` (R - 24 h); returns the new oldest.
    ///
    /// R only grows, so a result out of the window is out for good: dropping it changes no
    /// verdict (the identity check looks at the window anyway), only the record's size. Paid
    /// once per [`FORGET_SLACK_MS`] of the player's receipts, not at every event.
    pub fn forget(&mut self, cut: i64) -> i64 {
        let oldest = self.results.iter_mut().map(|g| g.forget(cut)).min().unwrap_or(NONE_HELD);
        self.results.retain(|g| !g.matches.is_empty());
        oldest
    }

    /// One result that passed checks 1 to 6, applied in place: the verdict and the entries it
    /// changed. R takes the event's `received_at` whatever the verdict (check 7's R counts
    /// every event that passed checks 1 to 6 and is taken before check 7); the rest changes
    /// only when the result is accepted.
    pub fn apply(
        &mut self,
        game: &str,
        m: &str,
        points: i64,
        played_at: i64,
        received_at: i64,
        seasons: &[Span],
    ) -> (Verdict, Vec<Entry>) {
        if received_at > self.r {
            self.r = received_at;
            if self.oldest < received_at - DAY_MS - FORGET_SLACK_MS {
                self.oldest = self.forget(received_at - DAY_MS);
            }
        }
        let newest = self.r;
        if played_at < newest - DAY_MS {
            return (Verdict::TooOld, Vec::new());
        }
        if played_at > received_at + FUTURE_MS {
            return (Verdict::InFuture, Vec::new());
        }
        let (at, held) = match self.results.iter().position(|g| &*g.game == game) {
            Some(at) => {
                let held = self.results[at].position(m);
                if let Some(seen) = held {
                    let (_, seen_points, seen_at) = &self.results[at].matches[seen];
                    let (seen_points, seen_at) = (*seen_points, *seen_at);
                    if seen_at >= newest - DAY_MS {
                        let same = seen_points == points && seen_at == played_at;
                        return (if same { Verdict::Duplicate } else { Verdict::Conflict }, Vec::new());
                    }
                }
                (at, held)
            }
            None => {
                self.results.push(GameResults::new(game));
                (self.results.len() - 1, None)
            }
        };
        self.results[at].put_at(held, m, points, played_at);
        self.oldest = self.oldest.min(played_at);
        let mut entries = Vec::with_capacity(4);
        self.enter(game, points, played_at, seasons, &mut entries);
        (Verdict::Accepted, entries)
    }

    /// Section 10: an accepted result of a group enters its group's boards too, the group's
    /// key (`GAME@FIELD=VALUE`) a game of its own; the changed entries.
    pub fn enter_group(&mut self, group: &str, points: i64, played_at: i64, seasons: &[Span]) -> Vec<Entry> {
        let mut out = Vec::with_capacity(4);
        self.enter(group, points, played_at, seasons, &mut out);
        out
    }

    /// Section 3: an accepted result enters `all`, `best`, its day's and week's boards and
    /// (section 9) each season it was played in; the changed entries go to `out`.
    fn enter(&mut self, game: &str, points: i64, played_at: i64, seasons: &[Span], out: &mut Vec<Entry>) {
        let at = match self.boards.iter().position(|g| &*g.game == game) {
            Some(at) => at,
            None => {
                self.boards.push(GameBoards { game: game.into(), boards: Vec::with_capacity(4) });
                self.boards.len() - 1
            }
        };
        let mine = &mut self.boards[at].boards;
        let day = day_of(played_at);
        add_to_sum(mine, Board::All, points, played_at, out);
        raise_best(mine, points, played_at, out);
        let new_day = add_to_sum(mine, Board::Daily(day), points, played_at, out);
        let new_week = add_to_sum(mine, Board::Weekly(monday(day)), points, played_at, out);
        if (new_day || new_week) && mine.len() > MOST_BOARDS {
            drop_old_periods(mine);
        }
        for season in seasons {
            if season.start <= played_at && played_at < season.end {
                add_to_sum(mine, Board::Season(season.name.as_str().into()), points, played_at, out);
            }
        }
    }

    /// Every `(game, board, aggregate)` of the record.
    pub fn aggregates(&self) -> impl Iterator<Item = (&str, &Board, &Aggregate)> + '_ {
        self.boards.iter().flat_map(|g| g.boards.iter().map(move |(b, a)| (&*g.game, b, a)))
    }
}

/// Section 4 on a sum board: reached_at is the last positive result, or the first while the
/// score is 0. Pushes the entry if the score or reached_at changed; true when the board is new.
fn add_to_sum(
    mine: &mut Vec<(Board, Aggregate)>,
    board: Board,
    points: i64,
    played_at: i64,
    out: &mut Vec<Entry>,
) -> bool {
    let Some((_, agg)) = mine.iter_mut().find(|(b, _)| *b == board) else {
        let last = if points != 0 { played_at } else { -1 };
        mine.push((board.clone(), Aggregate { score: points, last, first: played_at }));
        out.push(Entry { board, score: points, reached_at: played_at, new: true });
        return true;
    };
    let earlier = played_at < agg.first;
    if earlier {
        agg.first = played_at;
    }
    if points != 0 {
        agg.score += points;
        if played_at > agg.last {
            agg.last = played_at;
        }
        out.push(Entry { board, score: agg.score, reached_at: agg.last, new: false });
    } else if earlier && agg.score == 0 {
        out.push(Entry { board, score: 0, reached_at: played_at, new: false });
    }
    false
}

/// Section 4 on `best`: only a strictly greater result raises it; an equal one can only make
/// it earlier.
fn raise_best(mine: &mut Vec<(Board, Aggregate)>, points: i64, played_at: i64, out: &mut Vec<Entry>) {
    match mine.iter_mut().find(|(b, _)| *b == Board::Best) {
        None => {
            mine.push((Board::Best, Aggregate { score: points, last: -1, first: played_at }));
            out.push(Entry { board: Board::Best, score: points, reached_at: played_at, new: true });
        }
        Some((_, agg)) => {
            if points > agg.score || (points == agg.score && played_at < agg.first) {
                agg.score = points;
                agg.first = played_at;
                out.push(Entry { board: Board::Best, score: points, reached_at: played_at, new: false });
            }
        }
    }
}

/// Section 7 for one player: drop its own periods the game no longer keeps, cut from the
/// player's newest period of each kind (at most the game's newest, so the player never loses
/// a board the game still shows; and no later result of the player can fall in a dropped
/// one: it is played at most 24 h before R, the newest period at most 60 s after it).
/// Called only when the player holds more boards in the game than can all be kept.
fn drop_old_periods(mine: &mut Vec<(Board, Aggregate)>) {
    let newest_day = mine.iter().filter_map(|(b, _)| if let Board::Daily(d) = b { Some(*d) } else { None }).max();
    let newest_week = mine.iter().filter_map(|(b, _)| if let Board::Weekly(m) = b { Some(*m) } else { None }).max();
    mine.retain(|(b, _)| match b {
        Board::Daily(d) => *d >= newest_day.unwrap_or(*d) - KEPT_DAYS,
        Board::Weekly(m) => *m >= newest_week.unwrap_or(*m) - KEPT_DAYS,
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_keeps_the_match_index_right() {
        let mut held = GameResults::new("g");
        for (i, played_at) in [5, 1, 7, 2, 9].into_iter().enumerate() {
            held.put(&format!("m{i}"), i as i64, played_at);
        }
        assert_eq!(held.forget(5), 5);
        let left: Vec<&str> = held.matches.iter().map(|(m, _, _)| &**m).collect();
        assert_eq!(left, ["m0", "m2", "m4"]);
        assert_eq!((held.get("m0"), held.get("m2"), held.get("m4")), (Some((0, 5)), Some((2, 7)), Some((4, 9))));
        assert_eq!((held.get("m1"), held.get("m3"), held.index.len()), (None, None, 3));
        held.put("m2", 8, 8); // replaced where it is
        held.put("m5", 6, 6);
        assert_eq!((held.get("m2"), held.get("m5"), held.matches.len()), (Some((8, 8)), Some((6, 6)), 4));
        assert_eq!(held.forget(100), NONE_HELD);
        assert!(held.matches.is_empty() && held.index.is_empty());
    }

    const T: i64 = 1_798_884_000_000; // 2027-01-02 06:00 UTC

    #[test]
    fn calendar_names_round_trip() {
        for day in (-800..4000).chain(2_932_800..2_932_897) {
            for board in [Board::Daily(day), Board::Weekly(monday(day))] {
                assert_eq!(Board::parse(&board.name()), Some(board));
            }
        }
        assert_eq!(Board::Daily(day_of(T)).name(), "daily:2027-01-02");
        assert_eq!(Board::Weekly(monday(day_of(T))).name(), "weekly:2026-W53");
        assert_eq!(Board::Weekly(monday(0)).name(), "weekly:1970-W01");
        assert_eq!(Board::Daily(day_of(253_402_300_799_999)).name(), "daily:9999-12-31");
        assert_eq!(Board::Weekly(monday(day_of(253_402_300_799_999))).name(), "weekly:9999-W52");
        for bad in ["daily:2027-02-30", "weekly:2027-W53", "monthly:2027-01", "daily:2027-1-02", "weekly:2027-W1"] {
            assert_eq!(Board::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn first_result_single_then_held() {
        let First::Single(single, entries) = Record::first("g1", "m1", 50, T, T + 2000, &[], false) else { panic!() };
        assert_eq!(entries.len(), 4);
        let mut record = Record::from_single(&single).unwrap();
        let mut again = record.clone();
        assert_eq!(again.apply("g1", "m1", 50, T, T + 9000, &[]), (Verdict::Duplicate, vec![]));
        assert_eq!(again.apply("g1", "m1", 80, T, T + 9000, &[]).0, Verdict::Conflict);
        let (verdict, entries) = record.apply("g1", "m2", 10, T + 5, T + 2000, &[]);
        assert_eq!(verdict, Verdict::Accepted);
        assert_eq!(entries[0], Entry { board: Board::All, score: 60, reached_at: T + 5, new: false });
    }

    #[test]
    fn a_record_keeps_at_most_twelve_boards_a_game_and_a_day_of_results() {
        let First::Single(single, _) = Record::first("g", "m0", 1, T, T + 1000, &[], false) else { panic!() };
        let mut record = Record::from_single(&single).unwrap();
        for i in 1..40 {
            let at = T + i * DAY_MS / 4;
            assert_eq!(record.apply("g", &format!("m{i}"), 1, at, at + 1000, &[]).0, Verdict::Accepted);
            assert!(record.boards[0].boards.len() <= 12);
            let held = &record.results[0].matches;
            assert!(held.len() <= 6 && held.iter().all(|p| p.2 >= record.r - DAY_MS - FORGET_SLACK_MS));
            assert_eq!(record.oldest, held.iter().map(|p| p.2).min().unwrap());
        }
        assert!(single_fields(&single[..10]).is_err());
    }
}
