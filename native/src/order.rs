//! An ordered set of byte strings with positions: the board index's order (issue 39).
//!
//! The serving process answers a player's rank as "how many keys sort before this one"
//! (`state/board_index.py`). A Python `SortedList` of `bytes` does that in about 2 µs on a
//! 50,000-entry board, most of it following pointers to scattered `bytes` objects; this
//! keeps each key's first 16 bytes inline (the score and `reached_at` of a board key, so
//! nearly every comparison ends there) in blocks of contiguous memory, with a Fenwick tree
//! over the blocks' lengths for positions.
//!
//! Invariants ([`KeyOrder::check`]): every block is non-empty and sorted, each block's
//! last key is below the next block's first, `maxes[i]` is block `i`'s last key, and the
//! tree's prefix sums are the blocks' lengths.

use std::cmp::Ordering;

/// Keys per block past which a block is split in two halves.
const MAX_BLOCK: usize = 1024;

/// A key: its first 16 bytes as a big-endian number (zero-padded), then the whole key.
/// Comparing the numbers first and the bytes on a tie is byte order, as zero padding
/// only makes a shorter key equal to a longer one it is a prefix of, never greater.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    head: u128,
    bytes: Box<[u8]>,
}

impl Key {
    pub fn new(bytes: &[u8]) -> Key {
        let mut first = [0u8; 16];
        let n = bytes.len().min(16);
        first[..n].copy_from_slice(&bytes[..n]);
        Key { head: u128::from_be_bytes(first), bytes: bytes.into() }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key's place against `probe`, without making a key of it.
    fn against(&self, probe: &Probe<'_>) -> Ordering {
        self.head.cmp(&probe.head).then_with(|| (*self.bytes).cmp(probe.bytes))
    }
}

/// A key looked for, borrowed: no allocation per query.
pub struct Probe<'a> {
    head: u128,
    bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    pub fn new(bytes: &'a [u8]) -> Probe<'a> {
        let mut first = [0u8; 16];
        let n = bytes.len().min(16);
        first[..n].copy_from_slice(&bytes[..n]);
        Probe { head: u128::from_be_bytes(first), bytes }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.head.cmp(&other.head).then_with(|| self.bytes.cmp(&other.bytes))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The ordered set. Every operation is O(log n) but [`KeyOrder::slice`] (plus its length)
/// and a block's split or removal (O(blocks), once per [`MAX_BLOCK`]/2 changes at most).
#[derive(Default, Debug)]
pub struct KeyOrder {
    blocks: Vec<Vec<Key>>,
    maxes: Vec<Key>,
    tree: Vec<usize>, // Fenwick tree over the blocks' lengths, 1-based
    len: usize,
}

impl KeyOrder {
    /// The set of `keys` (any order; duplicates kept once).
    pub fn from_keys(mut keys: Vec<Key>) -> KeyOrder {
        keys.sort_unstable();
        keys.dedup();
        let mut order = KeyOrder { len: keys.len(), ..KeyOrder::default() };
        let half = MAX_BLOCK / 2;
        let mut rest = keys.into_iter().peekable();
        while rest.peek().is_some() {
            let block: Vec<Key> = rest.by_ref().take(half).collect();
            order.maxes.push(block[block.len() - 1].clone());
            order.blocks.push(block);
        }
        order.rebuild_tree();
        order
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many keys sort before `key` (in the set or not).
    pub fn bisect_left(&self, key: &Probe<'_>) -> usize {
        let b = self.maxes.partition_point(|m| m.against(key).is_lt());
        if b == self.blocks.len() {
            return self.len;
        }
        self.before_block(b) + self.blocks[b].partition_point(|k| k.against(key).is_lt())
    }

    /// The position of `key`, None if it is not in the set.
    pub fn index(&self, key: &Probe<'_>) -> Option<usize> {
        let b = self.maxes.partition_point(|m| m.against(key).is_lt());
        let block = self.blocks.get(b)?;
        let i = block.partition_point(|k| k.against(key).is_lt());
        block.get(i).filter(|k| k.against(key).is_eq()).map(|_| self.before_block(b) + i)
    }

    /// Add `key`; false if it was there already.
    pub fn add(&mut self, key: Key) -> bool {
        if self.blocks.is_empty() {
            self.maxes.push(key.clone());
            self.blocks.push(vec![key]);
            self.len = 1;
            self.rebuild_tree();
            return true;
        }
        let b = self.maxes.partition_point(|m| m < &key).min(self.blocks.len() - 1);
        let block = &mut self.blocks[b];
        let i = block.partition_point(|k| k < &key);
        if block.get(i) == Some(&key) {
            return false;
        }
        block.insert(i, key);
        if i == block.len() - 1 {
            self.maxes[b] = block[i].clone();
        }
        self.len += 1;
        if block.len() > MAX_BLOCK {
            let upper = block.split_off(block.len() / 2);
            self.maxes[b] = block[block.len() - 1].clone();
            self.maxes.insert(b + 1, upper[upper.len() - 1].clone());
            self.blocks.insert(b + 1, upper);
            self.rebuild_tree();
        } else {
            self.grow(b, 1);
        }
        true
    }

    /// Remove `key`; false if it was not there.
    pub fn remove(&mut self, key: &Key) -> bool {
        let b = self.maxes.partition_point(|m| m < key);
        let Some(block) = self.blocks.get_mut(b) else { return false };
        let i = block.partition_point(|k| k < key);
        if block.get(i) != Some(key) {
            return false;
        }
        block.remove(i);
        self.len -= 1;
        if block.is_empty() {
            self.blocks.remove(b);
            self.maxes.remove(b);
            self.rebuild_tree();
        } else {
            if i == block.len() {
                self.maxes[b] = block[i - 1].clone();
            }
            self.shrink(b, 1);
        }
        true
    }

    /// The key at position `at`, None past the end.
    pub fn get(&self, at: usize) -> Option<&Key> {
        let (b, i) = self.locate(at)?;
        Some(&self.blocks[b][i])
    }

    /// The keys at positions `start .. stop` (clamped to the set).
    pub fn slice(&self, start: usize, stop: usize) -> Vec<&Key> {
        let stop = stop.min(self.len);
        if start >= stop {
            return Vec::new();
        }
        let (b, i) = self.locate(start).expect("start is inside the set");
        self.blocks[b..].iter().flatten().skip(i).take(stop - start).collect()
    }

    /// Every key in order.
    pub fn iter(&self) -> impl Iterator<Item = &Key> {
        self.blocks.iter().flatten()
    }

    /// The invariants (see the module's doc); panics on the first one broken.
    pub fn check(&self) {
        assert_eq!(self.blocks.len(), self.maxes.len());
        assert_eq!(self.len, self.blocks.iter().map(Vec::len).sum::<usize>());
        let all: Vec<&Key> = self.iter().collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]), "keys in order, each once");
        for (b, block) in self.blocks.iter().enumerate() {
            assert!(!block.is_empty() && block.len() <= MAX_BLOCK);
            assert_eq!(&self.maxes[b], &block[block.len() - 1]);
            assert_eq!(self.before_block(b), self.blocks[..b].iter().map(Vec::len).sum::<usize>());
        }
    }

    /// Keys in the blocks before block `b` (the tree's prefix sum).
    fn before_block(&self, b: usize) -> usize {
        let (mut i, mut sum) = (b, 0);
        while i > 0 {
            sum += self.tree[i];
            i &= i - 1;
        }
        sum
    }

    /// The block and the place in it of position `at`: a descent of the tree.
    fn locate(&self, at: usize) -> Option<(usize, usize)> {
        if at >= self.len {
            return None;
        }
        let n = self.blocks.len();
        let (mut b, mut left) = (0, at);
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = b + step;
            if next <= n && self.tree[next] <= left {
                b = next;
                left -= self.tree[next];
            }
            step >>= 1;
        }
        Some((b, left))
    }

    fn grow(&mut self, b: usize, by: usize) {
        let mut i = b + 1;
        while i < self.tree.len() {
            self.tree[i] += by;
            i += i & i.wrapping_neg();
        }
    }

    fn shrink(&mut self, b: usize, by: usize) {
        let mut i = b + 1;
        while i < self.tree.len() {
            self.tree[i] -= by;
            i += i & i.wrapping_neg();
        }
    }

    /// The tree again from the blocks' lengths: O(blocks).
    fn rebuild_tree(&mut self) {
        let n = self.blocks.len();
        self.tree = vec![0; n + 1];
        for (b, block) in self.blocks.iter().enumerate() {
            self.tree[b + 1] += block.len();
            let parent = (b + 1) + ((b + 1) & (b + 1).wrapping_neg());
            if parent <= n {
                self.tree[parent] += self.tree[b + 1];
            }
        }
    }
}

/// `100 * (entries - rank) / entries` in hundredths, rounded half to even (docs/semantics/
/// boards.md 5.2), as Python writes the float of those hundredths: the shortest decimal that
/// reads back as it, which for a whole number of hundredths is its two decimals less their
/// trailing zeros, one kept (`99.9`, `66.67`, `0.0`).
pub fn percentile_json(rank: u64, entries: u64) -> String {
    let (numerator, entries) = (10_000 * entries.saturating_sub(rank) as u128, entries.max(1) as u128);
    let (mut q, rest) = (numerator / entries, numerator % entries);
    if 2 * rest > entries || (2 * rest == entries && q % 2 == 1) {
        q += 1;
    }
    let (whole, cents) = (q / 100, q % 100);
    match cents {
        0 => format!("{whole}.0"),
        c if c % 10 == 0 => format!("{whole}.{}", c / 10),
        c => format!("{whole}.{c:02}"),
    }
}

/// A keyed board's sorted-set score of an entry (`connectors/board_layout.py`, `KeyedBoard`):
/// the double whose 64-bit pattern is `(cap - score) << bits | (reached_at - origin)`, so
/// Redis's order of the doubles is the board's order; None when the entry is outside what
/// the key holds (a score above `cap`, a time outside the period).
pub fn keyed_score(score: i64, reached_at: i64, bits: u32, cap: i64, origin: i64) -> Option<f64> {
    let offset = reached_at.checked_sub(origin)?;
    if !(0..=cap).contains(&score) || offset < 0 || offset >> bits != 0 {
        return None;
    }
    Some(f64::from_bits(((cap - score) as u64) << bits | offset as u64))
}

/// `text` as a JSON string, byte for byte as orjson writes it: quotes, the two escapes JSON
/// needs, `\b \t \n \f \r` short, the other control characters as `\u00XX`.
pub fn json_string(out: &mut String, text: &str) {
    out.push('"');
    if !text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(text); // nearly every id: nothing to escape
        out.push('"');
        return;
    }
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A board key's score: its first 8 bytes are `2^64 - 1 - score`, big-endian.
pub fn key_score(key: &[u8]) -> Option<u64> {
    let first: [u8; 8] = key.get(..8)?.try_into().ok()?;
    Some(u64::MAX - u64::from_be_bytes(first))
}

impl KeyOrder {
    /// `(score, rank, competition rank)` of the board entry `key` (on the board or not):
    /// the rank counts the keys before it, the competition rank those of a greater score
    /// (the keys before the score's first possible key: its 8 bytes, then zeros).
    pub fn ranks_of(&self, key: &[u8]) -> Option<(u64, usize, usize)> {
        let score = key_score(key)?;
        let mut floor = [0u8; 16];
        floor[..8].copy_from_slice(&key[..8]);
        let ahead = self.bisect_left(&Probe::new(&floor));
        Some((score, self.bisect_left(&Probe::new(key)) + 1, ahead + 1))
    }
}

/// One board's entries: the keys in order and each player's key (a board key is 16 bytes of
/// score and `reached_at`, then the player id: [`KeyOrder`] holds the keys, and the map each
/// player's first 16 bytes, so a player's key is found without a Python object per entry).
#[derive(Default, Debug)]
pub struct BoardKeys {
    order: KeyOrder,
    players: std::collections::HashMap<Box<[u8]>, u128>,
    /// What the change set being applied did so far, while one is ([`BoardKeys::begin`]).
    flight: Option<Flight>,
}

/// What a change set applied so far did to one board (`state/board_index.py`): the keys it
/// added that are still there and the keys it removed that were there before it, both
/// sorted, each touched player's key before it (None: not on it), and how many players it
/// brought. So the board before the change set is `live - added + removed`, and any count
/// of keys before a key is the live count corrected by two bisections.
#[derive(Default, Debug)]
pub struct Flight {
    added: Vec<Key>,
    removed: Vec<Key>,
    before: std::collections::HashMap<Box<[u8]>, Option<Vec<u8>>>,
    joined: usize,
}

impl Flight {
    /// The board moved `player` from `old` (None: absent) to `new`. O(k) for k changes so
    /// far. A key names its player, so before the player's first change neither key is listed.
    fn record(&mut self, player: &[u8], old: Option<&[u8]>, new: &[u8]) {
        if !self.before.contains_key(player) {
            self.before.insert(player.into(), old.map(<[u8]>::to_vec));
            match old {
                None => self.joined += 1,
                Some(old) => insert_sorted(&mut self.removed, Key::new(old)),
            }
            insert_sorted(&mut self.added, Key::new(new));
            return;
        }
        if let Some(old) = old {
            discard_or_insert(&mut self.added, &mut self.removed, Key::new(old));
        }
        discard_or_insert(&mut self.removed, &mut self.added, Key::new(new));
    }

    /// Keys of `keys` (sorted) before `probe`.
    fn before_in(keys: &[Key], probe: &Probe<'_>) -> usize {
        keys.partition_point(|k| k.against(probe) == Ordering::Less)
    }
}

fn insert_sorted(keys: &mut Vec<Key>, key: Key) {
    let at = keys.partition_point(|k| *k < key);
    keys.insert(at, key);
}

/// Remove `key` from sorted `there` if it is in it, else insert it into sorted `other`.
fn discard_or_insert(there: &mut Vec<Key>, other: &mut Vec<Key>, key: Key) {
    match there.binary_search(&key) {
        Ok(at) => {
            there.remove(at);
        }
        Err(_) => insert_sorted(other, key),
    }
}

/// Why a key cannot be a board key.
#[derive(Debug, PartialEq, Eq)]
pub enum BadKey {
    /// Shorter than the 16 bytes of score and `reached_at`.
    Short,
    /// Its player is not the one it was given for, or a player came twice.
    Player,
}

impl BoardKeys {
    /// A board from its keys, one per player (any order).
    pub fn from_keys(keys: Vec<Key>) -> Result<BoardKeys, BadKey> {
        let mut players = std::collections::HashMap::with_capacity(keys.len());
        for key in &keys {
            let player = key.bytes.get(16..).ok_or(BadKey::Short)?;
            if players.insert(player.into(), key.head).is_some() {
                return Err(BadKey::Player);
            }
        }
        Ok(BoardKeys { order: KeyOrder::from_keys(keys), players, flight: None })
    }

    pub fn order(&self) -> &KeyOrder {
        &self.order
    }

    /// The player's key, None if not on the board.
    pub fn key(&self, player: &[u8]) -> Option<Vec<u8>> {
        let head = self.players.get(player)?;
        let mut key = head.to_be_bytes().to_vec();
        key.extend_from_slice(player);
        Some(key)
    }

    /// Put `key`'s player at `key`; the key it had (None: not on the board).
    pub fn upsert(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, BadKey> {
        let player = key.get(16..).ok_or(BadKey::Short)?;
        let new = Key::new(key);
        let old = self.key(player);
        if old.as_deref() == Some(key) {
            return Ok(old);
        }
        if let Some(old) = &old {
            self.order.remove(&Key::new(old));
        }
        self.players.insert(player.into(), new.head);
        self.order.add(new);
        if let Some(flight) = &mut self.flight {
            flight.record(player, old.as_deref(), key);
        }
        Ok(old)
    }

    /// From now on record what changes, until [`BoardKeys::settle`]: the queries `*_before`
    /// answer the board as it was here. Nothing if recording already.
    pub fn begin(&mut self) {
        self.flight.get_or_insert_with(Flight::default);
    }

    /// Forget what was recorded: the board as it is is the one served again.
    pub fn settle(&mut self) {
        self.flight = None;
    }

    /// Whether anything changed since [`BoardKeys::begin`].
    pub fn recorded(&self) -> bool {
        self.flight.as_ref().is_some_and(|f| !f.before.is_empty())
    }

    /// Entries before the change set being applied.
    pub fn len_before(&self) -> usize {
        self.order.len() - self.flight.as_ref().map_or(0, |f| f.joined)
    }

    /// The player's key before the change set being applied, None if not on the board then.
    pub fn key_before(&self, player: &[u8]) -> Option<Vec<u8>> {
        match self.flight.as_ref().and_then(|f| f.before.get(player)) {
            Some(before) => before.clone(),
            None => self.key(player),
        }
    }

    /// Keys before `key` (on the board or not) before the change set being applied.
    pub fn below_before(&self, key: &[u8]) -> usize {
        let probe = Probe::new(key);
        let live = self.order.bisect_left(&probe);
        match &self.flight {
            None => live,
            Some(f) => live + Flight::before_in(&f.removed, &probe) - Flight::before_in(&f.added, &probe),
        }
    }

    /// `(score, rank, competition rank)` of `key` before the change set being applied (see
    /// [`KeyOrder::ranks_of`]).
    pub fn ranks_before(&self, key: &[u8]) -> Option<(u64, usize, usize)> {
        let score = key_score(key)?;
        let mut floor = [0u8; 16];
        floor[..8].copy_from_slice(&key[..8]);
        Some((score, self.below_before(key) + 1, self.below_before(&floor) + 1))
    }

    /// The keys the change set added that are still there, and those it removed, in order.
    pub fn flight_keys(&self) -> (&[Key], &[Key]) {
        match &self.flight {
            None => (&[], &[]),
            Some(f) => (&f.added, &f.removed),
        }
    }

    /// The invariants: the order's, and the map holding exactly the order's keys.
    pub fn check(&self) {
        self.order.check();
        assert_eq!(self.players.len(), self.order.len());
        for key in self.order.iter() {
            assert_eq!(self.players.get(&key.bytes[16..]), Some(&key.head));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A small deterministic generator (no dependency): xorshift.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn key(n: u64) -> Key {
        let mut bytes = (n % 97).to_be_bytes().to_vec(); // few heads: ties decided past 16 bytes
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(format!("p{n}").as_bytes());
        Key::new(&bytes)
    }

    /// A board key of `player` at `score` (8 bytes of `2^64 - 1 - score`, 8 of time 0).
    fn board_key(score: u64, player: &str) -> Vec<u8> {
        let mut bytes = (u64::MAX - score).to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(player.as_bytes());
        bytes
    }

    #[test]
    fn the_board_before_a_change_set_is_answered_while_it_is_applied() {
        let mut rng = Rng(0x2545f4914f6cdd1d);
        for _round in 0..200 {
            let mut board = BoardKeys::default();
            for _ in 0..rng.next() % 30 {
                let player = format!("p{}", rng.next() % 20);
                board.upsert(&board_key(rng.next() % 6, &player)).unwrap();
            }
            let before: Vec<Vec<u8>> = board.order().iter().map(|k| k.as_bytes().to_vec()).collect();
            board.begin();
            for _ in 0..rng.next() % 40 {
                let player = format!("p{}", rng.next() % 24);
                board.upsert(&board_key(rng.next() % 6, &player)).unwrap();
                assert_eq!(board.len_before(), before.len());
                for probe in 0..8 {
                    let probe = board_key(probe % 7, &format!("p{}", rng.next() % 24));
                    assert_eq!(board.below_before(&probe), before.iter().filter(|k| **k < probe).count());
                }
                for p in 0..24 {
                    let player = format!("p{p}");
                    let then = before.iter().find(|k| &k[16..] == player.as_bytes()).cloned();
                    assert_eq!(board.key_before(player.as_bytes()), then);
                }
            }
            board.settle();
            assert!(!board.recorded() && board.len_before() == board.order().len());
            board.check();
        }
    }

    #[test]
    fn matches_a_btreeset_under_random_changes() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        let mut order = KeyOrder::default();
        let mut model = BTreeSet::new();
        for step in 0..20_000u32 {
            let k = key(rng.next() % 3_000);
            if rng.next().is_multiple_of(3) {
                assert_eq!(order.remove(&k), model.remove(&k));
            } else {
                assert_eq!(order.add(k.clone()), model.insert(k.clone()));
            }
            let probe = key(rng.next() % 3_000);
            let looked = Probe::new(probe.as_bytes());
            assert_eq!(order.bisect_left(&looked), model.range(..&probe).count());
            assert_eq!(order.index(&looked), model.contains(&probe).then(|| model.range(..&probe).count()));
            if step.is_multiple_of(1_000) {
                order.check();
                let all: Vec<&Key> = model.iter().collect();
                assert_eq!(order.iter().collect::<Vec<_>>(), all);
                let at = (rng.next() as usize) % (all.len() + 1);
                assert_eq!(order.get(at), all.get(at).copied());
                assert_eq!(order.slice(at, at + 50), all[at..(at + 50).min(all.len())].to_vec());
            }
        }
        order.check();
        assert_eq!(order.len(), model.len());
    }

    #[test]
    fn a_board_keeps_one_key_per_player() {
        let entry = |score: u8, player: &str| {
            let mut k = vec![score; 16];
            k.extend_from_slice(player.as_bytes());
            k
        };
        let mut board = BoardKeys::from_keys(vec![Key::new(&entry(5, "ana")), Key::new(&entry(7, "bo"))]).unwrap();
        assert_eq!(board.upsert(&entry(9, "ana")), Ok(Some(entry(5, "ana"))));
        assert_eq!(board.upsert(&entry(9, "ana")), Ok(Some(entry(9, "ana"))));
        assert_eq!(board.upsert(&entry(1, "cy")), Ok(None));
        assert_eq!(board.key(b"ana"), Some(entry(9, "ana")));
        assert_eq!(board.key(b"zed"), None);
        assert_eq!(board.upsert(b"short"), Err(BadKey::Short));
        assert_eq!(
            BoardKeys::from_keys(vec![Key::new(&entry(1, "a")), Key::new(&entry(2, "a"))]).unwrap_err(),
            BadKey::Player
        );
        board.check();
        let order: Vec<&[u8]> = board.order().iter().map(Key::as_bytes).collect();
        assert_eq!(order, vec![&entry(1, "cy")[..], &entry(7, "bo")[..], &entry(9, "ana")[..]]);
    }

    #[test]
    fn keyed_scores_order_as_the_board() {
        let day = |score, at| keyed_score(score, at, 27, (2047i64 << 52 >> 27) - 1, 1_000).unwrap();
        assert!(day(120, 1_000) < day(120, 1_001) && day(120, 1_001) < day(119, 1_000));
        assert_eq!(keyed_score(10_001, 5, 48, 10_000, 0), None);
        assert_eq!(keyed_score(5, 999, 27, 100, 1_000), None);
        assert_eq!(keyed_score(5, 1_000 + (1 << 27), 27, 100, 1_000), None);
        let mut out = String::new();
        json_string(&mut out, "a\"b\\c\u{1}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\u0001é\"");
    }

    #[test]
    fn percentiles_as_python_writes_them() {
        assert_eq!(percentile_json(1, 1000), "99.9");
        assert_eq!(percentile_json(1, 1), "0.0");
        assert_eq!(percentile_json(2, 8), "75.0");
        assert_eq!(percentile_json(1, 3), "66.67");
        assert_eq!(percentile_json(0, 5), "100.0");
        assert_eq!(percentile_json(1, 200), "99.5");
        assert_eq!(percentile_json(3, 40_000), "99.99"); // 99.9925: half-even down
    }

    #[test]
    fn byte_order_with_short_keys() {
        let mut keys: Vec<Vec<u8>> =
            vec![vec![], vec![0], vec![1], vec![1, 0], vec![0; 16], vec![0; 17], vec![255; 20]];
        let order = KeyOrder::from_keys(keys.iter().map(|k| Key::new(k)).collect());
        keys.sort();
        assert_eq!(
            order.iter().map(Key::as_bytes).collect::<Vec<_>>(),
            keys.iter().map(Vec::as_slice).collect::<Vec<_>>()
        );
        order.check();
    }
}
