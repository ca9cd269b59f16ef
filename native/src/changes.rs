//! A player shard's changes between two barriers, and its changelog frames and images written
//! as JSON bytes from the kernel's own records (issue 41: made in Python, a frame's pieces,
//! an image's list forms and the sets that tracked the changes were 88% of the durable
//! boards flow's extra CPU).
//!
//! The bytes are what `connectors/changelog.py` wrote before from the Python forms
//! (`state.board_rules`: a record's stored form, a piece `{"r", "R", "b"}`), so a recovery
//! directory of either code reads back the same way (`merge_piece`, `loaded`); the Python
//! writer that made them is now the tests' model of this one.

use std::io::Write;

use crate::rules::{single_fields, Aggregate, BadRecord, Board, Entry, Record};

/// A JSON string: `"`, `\` and the control characters escaped, the rest as its UTF-8.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\') {
        out.extend_from_slice(bytes); // ids rarely need an escape: one copy
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => {
                out.extend_from_slice(&bytes[start..at]);
                let _ = write!(out, "\\u{byte:04x}");
                start = at + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..at]);
        out.extend_from_slice(escape);
        start = at + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// An integer in decimal (the formatter's machinery costs more than the digits, for many small numbers).
fn write_int(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// `[best, first]` of `best`, `[score, last, first]` of a sum board.
fn write_aggregate(out: &mut Vec<u8>, board: &Board, agg: &Aggregate) {
    out.push(b'[');
    write_int(out, agg.score);
    out.push(b',');
    if *board != Board::Best {
        write_int(out, agg.last);
        out.push(b',');
    }
    write_int(out, agg.first);
    out.push(b']');
}

fn write_board(out: &mut Vec<u8>, board: &Board, agg: &Aggregate) {
    write_str(out, &board.name());
    out.push(b':');
    write_aggregate(out, board, agg);
}

/// A held record's list form: `[R, oldest, {game: {match: [points, played_at]}}, {game: {board: aggregate}}]`.
pub fn write_record(out: &mut Vec<u8>, record: &Record) {
    out.push(b'[');
    write_int(out, record.r);
    out.push(b',');
    write_int(out, record.oldest);
    out.extend_from_slice(b",{");
    for (i, game) in record.results.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_game_results(out, &game.game, &game.matches);
    }
    out.extend_from_slice(b"},{");
    for (i, game) in record.boards.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, &game.game);
        out.extend_from_slice(b":{");
        for (j, (board, agg)) in game.boards.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            write_board(out, board, agg);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"}]");
}

/// One game's results, `game: {match: [points, played_at], ...}`: a record's list form and a
/// changelog piece write them alike.
fn write_game_results(out: &mut Vec<u8>, game: &str, results: &[(Box<str>, i64, i64)]) {
    write_str(out, game);
    out.extend_from_slice(b":{");
    for (j, (m, points, played_at)) in results.iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        write_result(out, m, *points, *played_at);
    }
    out.push(b'}');
}

fn write_result(out: &mut Vec<u8>, m: &str, points: i64, played_at: i64) {
    write_str(out, m);
    out.extend_from_slice(b":[");
    write_int(out, points);
    out.push(b',');
    write_int(out, played_at);
    out.push(b']');
}

/// A single record's stored form: `["packed", R, game, match, points, played_at]`.
pub fn write_single(out: &mut Vec<u8>, data: &[u8]) -> Result<(), BadRecord> {
    let (r, game, m, points, played_at) = single_fields(data)?;
    out.extend_from_slice(b"[\"packed\",");
    write_int(out, r);
    out.push(b',');
    write_str(out, game);
    out.push(b',');
    write_str(out, m);
    out.push(b',');
    write_int(out, points);
    out.push(b',');
    write_int(out, played_at);
    out.push(b']');
    Ok(())
}

/// One game key's part of a barrier's changes: the results accepted in it (in arrival order)
/// and the boards they changed (a group's game key holds boards only).
#[derive(Debug, Default)]
struct NotedGame {
    game: Box<str>,
    results: Vec<(Box<str>, i64, i64)>,
    boards: Vec<Board>,
}

/// What changed in one player's record since the last barrier. `whole`: the record was new or
/// single when the barrier began, so the earlier frames may not hold it and the frame writes it
/// whole; otherwise the frame's piece holds R, the accepted results and the changed boards'
/// aggregates as the record holds them at the barrier.
#[derive(Debug, Default)]
pub struct Noted {
    pub whole: bool,
    accepted: bool,
    games: Vec<NotedGame>,
}

impl Noted {
    fn game(&mut self, game: &str) -> &mut NotedGame {
        let at = match self.games.iter().position(|g| *g.game == *game) {
            Some(at) => at,
            None => {
                self.games.push(NotedGame { game: game.into(), ..NotedGame::default() });
                self.games.len() - 1
            }
        };
        &mut self.games[at]
    }

    /// The frame writes the record whole.
    pub fn set_whole(&mut self) {
        self.whole = true;
        self.accepted = false;
        self.games = Vec::new();
    }

    /// An accepted result and the entries it changed on its game's boards.
    pub fn note_result(&mut self, game: &str, m: &str, points: i64, played_at: i64, entries: &[Entry]) {
        if self.whole {
            return;
        }
        self.accepted = true;
        let noted = self.game(game);
        noted.results.push((m.into(), points, played_at));
        add_boards(&mut noted.boards, entries);
    }

    /// The entries an accepted result changed on its group's boards (game key `group`).
    pub fn note_group(&mut self, group: &str, entries: &[Entry]) {
        if self.whole || entries.is_empty() {
            return;
        }
        add_boards(&mut self.game(group).boards, entries);
    }

    /// The piece of a held record: `{"r": {game: {match: [points, played_at]}}, "R": [R, oldest],
    /// "b": {game: {board: aggregate}}}`, `r` and `b` only after an accepted result; `b` names
    /// the noted boards the record still holds.
    pub fn write_piece(&self, out: &mut Vec<u8>, record: &Record) {
        out.push(b'{');
        if self.accepted {
            out.extend_from_slice(b"\"r\":{");
            let mut first = true;
            for game in self.games.iter().filter(|g| !g.results.is_empty()) {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_game_results(out, &game.game, &game.results);
            }
            out.extend_from_slice(b"},");
        }
        out.extend_from_slice(b"\"R\":[");
        write_int(out, record.r);
        out.push(b',');
        write_int(out, record.oldest);
        out.push(b']');
        if self.accepted {
            out.extend_from_slice(b",\"b\":{");
            let mut first = true;
            for game in &self.games {
                let Some(mine) = record.boards.iter().find(|g| *g.game == *game.game) else { continue };
                if !first {
                    out.push(b',');
                }
                first = false;
                write_str(out, &game.game);
                out.extend_from_slice(b":{");
                let mut first_board = true;
                for board in &game.boards {
                    let Some((_, agg)) = mine.boards.iter().find(|(b, _)| b == board) else { continue };
                    if !first_board {
                        out.push(b',');
                    }
                    first_board = false;
                    write_board(out, board, agg);
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
}

fn add_boards(boards: &mut Vec<Board>, entries: &[Entry]) {
    for entry in entries {
        if !boards.contains(&entry.board) {
            boards.push(entry.board.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::pack_single;

    #[test]
    fn strings_are_escaped_as_json() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\u0001é\"".as_bytes());
    }

    #[test]
    fn integers_are_written_in_decimal() {
        for n in [0, 7, -7, 10, 1_798_884_000_000, i64::MAX, i64::MIN, 1 << 62] {
            let mut out = Vec::new();
            write_int(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_single_record_is_written_packed() {
        let single = pack_single(20, "g\"1", "m1", 50, 10).expect("in range");
        let mut out = Vec::new();
        write_single(&mut out, &single).expect("a single record");
        assert_eq!(out, b"[\"packed\",20,\"g\\\"1\",\"m1\",50,10]");
    }

    #[test]
    fn a_piece_without_accepted_results_holds_r_alone() {
        let record = Record::empty(7);
        let mut out = Vec::new();
        Noted::default().write_piece(&mut out, &record);
        assert_eq!(String::from_utf8(out).expect("utf-8"), format!("{{\"R\":[7,{}]}}", record.oldest));
    }
}
