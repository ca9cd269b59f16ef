//! Match results and their stateless checks (docs/semantics/boards.md section 1, checks 1 to 6).
//!
//! A result that fails a check is refused with the first failed check's reason code and
//! a detail naming every field at fault; checks 3, 4 and 5 each look at all six fields
//! before the next starts. Checks 7 and 8 need the player's newest receipt, so they
//! belong to the per-player rules, as do duplicates and conflicts.

use std::borrow::Cow;

use crate::json::{read_top, Top, Value};
use crate::signature::Signer;

pub const INVALID_JSON: &str = "invalid_json";
pub const NOT_AN_OBJECT: &str = "not_an_object";
pub const MISSING_FIELD: &str = "missing_field";
pub const WRONG_TYPE: &str = "wrong_type";
pub const OUT_OF_RANGE: &str = "out_of_range";
pub const BAD_SIGNATURE: &str = "bad_signature";

pub const MAX_ID_CHARS: usize = 64;
pub const MAX_POINTS: u64 = 10_000;
/// 9999-12-31T23:59:59.999Z in ms.
pub const MAX_TIME: u64 = 253_402_300_799_999;
/// A group value (`rankflow run --flow boards --group-by FIELD`): 1 to this many of
/// `A-Z a-z 0-9 _ . -`, so `BOARD@FIELD=VALUE` is one board name in a path and a key.
pub const MAX_GROUP_CHARS: usize = 32;

/// The six fields in the order checks name them, then `sig`.
const NAMES: [&str; 7] = ["game_id", "match_id", "player_id", "points", "played_at", "received_at", "sig"];
const IDS: usize = 3;
const MAXIMA: [u64; 3] = [MAX_POINTS, MAX_TIME, MAX_TIME];
const RANGES: [&str; 3] = ["0 to 10000", "0 to 253402300799999", "0 to 253402300799999"];

/// A result that passed checks 1 to 6; ids borrowed from the input when they hold no escape.
#[derive(Debug, Clone, PartialEq)]
pub struct Score<'a> {
    pub game: Cow<'a, str>,
    pub r#match: Cow<'a, str>,
    pub player: Cow<'a, str>,
    pub points: u64,
    pub played_at: u64,
    pub received_at: u64,
    /// The group field's value (`--group-by`), when the run groups and the result has one.
    pub group: Option<Cow<'a, str>>,
}

/// The first failed check: its reason code and a readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: &'static str,
    pub detail: String,
}

/// The wanted fields of a record that is a JSON object; else refused as `invalid_json` or
/// `not_an_object` (the first checks of every flow's records).
pub fn read_object<'a, const N: usize>(raw: &'a [u8], names: &[&str; N]) -> Result<[Option<Value<'a>>; N], Refused> {
    match read_top(raw, names) {
        Err(not_json) => Err(Refused { reason: INVALID_JSON, detail: not_json.0 }),
        Ok(Top::Other(value)) => {
            Err(Refused { reason: NOT_AN_OBJECT, detail: format!("expected a JSON object, got {}", value.kind()) })
        }
        Ok(Top::Object(fields)) => Ok(fields),
    }
}

fn refused(reason: &'static str, details: Vec<String>) -> Refused {
    Refused { reason, detail: details.join("; ") }
}

/// An integer literal's value if it is within `0..=max`.
fn in_range(literal: &str, max: u64) -> Option<u64> {
    if let Some(digits) = literal.strip_prefix('-') {
        // -0 is the integer zero; anything else below zero is out of range.
        return digits.bytes().all(|b| b == b'0').then_some(0);
    }
    if literal.len() > 19 {
        return None; // JSON has no leading zeros: beyond every maximum
    }
    literal.parse::<u64>().ok().filter(|v| *v <= max)
}

/// Checks 1 to 6 of one record; `signer` None checks no signature.
pub fn check<'a>(raw: &'a [u8], signer: Option<&Signer>) -> Result<Score<'a>, Refused> {
    check_fields(raw, signer, &NAMES)
}

/// [`check`] of a run that groups its boards by the field `group` (docs/semantics/boards.md
/// 10): the field is optional (absent or null: no group); any other value than a string of
/// 1 to [`MAX_GROUP_CHARS`] of `A-Z a-z 0-9 _ . -` is refused with check 4 or 5, as is a
/// `game_id` holding `@FIELD=` (it would read as another game's group boards).
pub fn check_grouped<'a>(raw: &'a [u8], signer: Option<&Signer>, group: &str) -> Result<Score<'a>, Refused> {
    let names = [NAMES[0], NAMES[1], NAMES[2], NAMES[3], NAMES[4], NAMES[5], NAMES[6], group];
    check_fields(raw, signer, &names)
}

fn group_value_ok(value: &str) -> bool {
    (1..=MAX_GROUP_CHARS).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

/// The checks over `names`: the six fields and `sig`, then (N = 8) the group field.
fn check_fields<'a, const N: usize>(
    raw: &'a [u8],
    signer: Option<&Signer>,
    names: &[&str; N],
) -> Result<Score<'a>, Refused> {
    let fields = read_object(raw, names)?;
    let missing: Vec<String> =
        NAMES[..6].iter().zip(&fields).filter(|(_, v)| v.is_none()).map(|(n, _)| format!("{n} is missing")).collect();
    if !missing.is_empty() {
        return Err(refused(MISSING_FIELD, missing));
    }
    let mut wrong = Vec::new();
    for (i, name) in NAMES[..6].iter().enumerate() {
        match (i < IDS, &fields[i]) {
            (true, Some(Value::Str(_))) | (false, Some(Value::Int(_))) => {}
            (true, _) => wrong.push(format!("{name} must be a string")),
            (false, _) => wrong.push(format!("{name} must be an integer")),
        }
    }
    if N > 7 && !matches!(&fields[7], None | Some(Value::Null) | Some(Value::Str(_))) {
        wrong.push(format!("{} must be a string (or absent)", names[7]));
    }
    if !wrong.is_empty() {
        return Err(refused(WRONG_TYPE, wrong));
    }
    let mut bad = Vec::new();
    let mut ids: [&str; 3] = [""; 3];
    for (i, id) in ids.iter_mut().enumerate() {
        if let Some(Value::Str(s)) = &fields[i] {
            *id = s;
            if !(1..=MAX_ID_CHARS).contains(&s.chars().count()) {
                bad.push(format!("{} must be 1 to {MAX_ID_CHARS} characters long", NAMES[i]));
            }
        }
    }
    let mut ints = [0u64; 3];
    for (j, int) in ints.iter_mut().enumerate() {
        if let Some(Value::Int(literal)) = &fields[IDS + j] {
            match in_range(literal, MAXIMA[j]) {
                Some(v) => *int = v,
                None => bad.push(format!("{} must be {}", NAMES[IDS + j], RANGES[j])),
            }
        }
    }
    if N > 7 {
        if let Some(Value::Str(value)) = &fields[7] {
            if !group_value_ok(value) {
                bad.push(format!("{} must be 1 to {MAX_GROUP_CHARS} of A-Z a-z 0-9 _ . -", names[7]));
            }
        }
        if ids[0].contains(&format!("@{}=", names[7])) {
            bad.push(format!("game_id must not hold '@{0}=' while boards are grouped by {0}", names[7]));
        }
    }
    if !bad.is_empty() {
        return Err(refused(OUT_OF_RANGE, bad));
    }
    if let Some(signer) = signer {
        let detail = match &fields[6] {
            None => Some("sig is missing"),
            Some(Value::Str(sig)) => (!signer.verify(sig.as_bytes(), ids[0], ids[1], ids[2], ints[0], ints[1]))
                .then_some("sig is not the lowercase hex HMAC-SHA256 of this result under the signing key"),
            Some(_) => Some("sig must be a string"),
        };
        if let Some(detail) = detail {
            return Err(Refused { reason: BAD_SIGNATURE, detail: detail.into() });
        }
    }
    let mut fields = fields.into_iter();
    let mut text = || match fields.next() {
        Some(Some(Value::Str(s))) => s,
        _ => unreachable!("checked above"),
    };
    let (game, r#match, player) = (text(), text(), text());
    let group = match fields.nth(4) {
        Some(Some(Value::Str(s))) => Some(s),
        _ => None,
    };
    Ok(Score { game, r#match, player, points: ints[0], played_at: ints[1], received_at: ints[2], group })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"game_id":"g1","match_id":"m1","player_id":"ana","points":5,"played_at":1,"received_at":2}"#;

    fn reason(raw: &str, signer: Option<&Signer>) -> &'static str {
        check(raw.as_bytes(), signer).map(|_| "ok").unwrap_or_else(|r| r.reason)
    }

    fn with(field: &str, value: &str) -> String {
        LINE.replacen('}', &format!(r#","{field}":{value}}}"#), 1)
    }

    #[test]
    fn a_valid_line() {
        let score = check(LINE.as_bytes(), None).unwrap();
        assert_eq!((&*score.game, &*score.r#match, &*score.player), ("g1", "m1", "ana"));
        assert_eq!((score.points, score.played_at, score.received_at), (5, 1, 2));
        assert!(matches!(score.game, Cow::Borrowed(_)));
    }

    #[test]
    fn each_check_in_turn() {
        assert_eq!(reason("{", None), INVALID_JSON);
        assert_eq!(reason("[]", None), NOT_AN_OBJECT);
        assert_eq!(reason(&LINE.replace(r#""points":5,"#, ""), None), MISSING_FIELD);
        assert_eq!(reason(&with("points", "5.0"), None), WRONG_TYPE);
        assert_eq!(reason(&with("points", "null"), None), WRONG_TYPE);
        assert_eq!(reason(&with("points", "10001"), None), OUT_OF_RANGE);
        assert_eq!(reason(&with("points", "-1"), None), OUT_OF_RANGE);
        assert_eq!(reason(&with("points", &"9".repeat(500)), None), OUT_OF_RANGE);
        assert_eq!(reason(&with("points", "-0"), None), "ok");
        assert_eq!(reason(&with("game_id", &format!("\"{}\"", "é".repeat(64))), None), "ok");
        assert_eq!(reason(&with("game_id", &format!("\"{}\"", "é".repeat(65))), None), OUT_OF_RANGE);
        assert_eq!(reason(&with("game_id", "\"\""), None), OUT_OF_RANGE);
        assert_eq!(reason(LINE, Some(&Signer::new(b"k"))), BAD_SIGNATURE);
    }

    #[test]
    fn details_name_every_field_at_fault() {
        let raw =
            r#"{"game_id": 1, "match_id": "m", "player_id": "p", "points": "5", "played_at": 0, "received_at": 0}"#;
        assert_eq!(
            check(raw.as_bytes(), None).unwrap_err().detail,
            "game_id must be a string; points must be an integer"
        );
        assert_eq!(check(b"{}", None).unwrap_err().detail.matches("is missing").count(), 6);
        assert_eq!(check(b"7", None).unwrap_err().detail, "expected a JSON object, got a number");
    }

    #[test]
    fn a_group_field() {
        let grouped =
            |raw: &str| check_grouped(raw.as_bytes(), None, "region").map(|s| s.group.map(|g| g.into_owned()));
        assert_eq!(grouped(LINE), Ok(None));
        assert_eq!(grouped(&with("region", "null")), Ok(None));
        assert_eq!(grouped(&with("region", r#""eu-1.b_C""#)), Ok(Some("eu-1.b_C".into())));
        assert_eq!(grouped(&with("region", "7")).unwrap_err().reason, WRONG_TYPE);
        assert_eq!(grouped(&with("region", "7")).unwrap_err().detail, "region must be a string (or absent)");
        assert_eq!(grouped(&with("region", r#""e u""#)).unwrap_err().reason, OUT_OF_RANGE);
        assert_eq!(grouped(&with("region", r#""""#)).unwrap_err().reason, OUT_OF_RANGE);
        assert_eq!(grouped(&with("region", &format!("\"{}\"", "a".repeat(33)))).unwrap_err().reason, OUT_OF_RANGE);
        let game = LINE.replace(r#""g1""#, r#""g1@region=eu""#);
        assert_eq!(grouped(&game).unwrap_err().reason, OUT_OF_RANGE);
        assert_eq!(reason(&game, None), "ok"); // without grouping, any game id
        assert_eq!(check(with("region", "7").as_bytes(), None).map(|s| s.group), Ok(None));
    }

    #[test]
    fn signatures() {
        let signer = Signer::new(&[7; 32]);
        let sig = signer.hex("g1", "m1", "ana", 5, 1);
        let signed = with("sig", &format!("\"{}\"", std::str::from_utf8(&sig).unwrap()));
        assert_eq!(reason(&signed, Some(&signer)), "ok");
        assert_eq!(check(with("sig", "7").as_bytes(), Some(&signer)).unwrap_err().detail, "sig must be a string");
        assert_eq!(check(LINE.as_bytes(), Some(&signer)).unwrap_err().detail, "sig is missing");
        assert_eq!(reason(&signed.replace(r#""received_at":2"#, r#""received_at":3"#), Some(&signer)), "ok");
        assert_eq!(reason(&signed.replace(r#""points":5"#, r#""points":6"#), Some(&signer)), BAD_SIGNATURE);
    }
}
