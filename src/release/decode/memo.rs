//! What reading a payload found, remembered by a keyed hash of the payload: the API server sends the
//! same stored record again and again (its CREATE, every UPDATE's old side, its DELETE), and
//! reading it (base64, gzip, the whole release checked as Helm reads it) is most of a decision's
//! cost.
//!
//! Keyed by the bytes themselves, not by uid and resourceVersion: what a payload reads as is a
//! function of its bytes alone, so a forged request can teach the memo nothing that the same
//! bytes would not tell anyway. The key is SipHash (a keyed PRF) under a key drawn at random per
//! process (std's `RandomState`), with the length: a forger who cannot see the key cannot aim
//! for a collision, and SipHash is several times faster than SHA-256 here (SHA-256 measured at
//! 12 % of a verdict's CPU).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Mutex;

use super::helm_release::ReleasePayload;
use super::{DecodeError, DecodeLimits, Fingerprinting, Storage};

/// How many readings are remembered: a cluster's active records several times over; each is a
/// few hundred bytes.
pub(crate) const DEFAULT_CAPACITY: usize = 4096;

type Key = (u64, usize);

/// A reading: the payload, or why Helm cannot read it (as text; the error itself is not `Clone`).
type Reading = Result<ReleasePayload, DecodeError>;

#[derive(Debug)]
/// Payload readings by a keyed hash of the payload, the oldest forgotten first.
pub(crate) struct PayloadMemo {
    capacity: usize,
    key: RandomState,
    state: Mutex<(HashMap<Key, Reading>, VecDeque<Key>)>,
}

impl Default for PayloadMemo {
    fn default() -> Self {
        PayloadMemo::new(DEFAULT_CAPACITY)
    }
}

impl PayloadMemo {
    /// A memo of at most `capacity` readings.
    pub(crate) fn new(capacity: usize) -> PayloadMemo {
        PayloadMemo { capacity: capacity.max(1), key: RandomState::new(), state: Mutex::default() }
    }

    /// Reads `stored` (from `storage`) with `read`, or answers from memory (the same reading, or
    /// the same error). A reading
    /// without the content fingerprint does not answer a request that wants one.
    pub(crate) fn read(
        &self,
        stored: &[u8],
        storage: Storage,
        limits: DecodeLimits,
        fingerprinting: Fingerprinting,
        read: impl FnOnce() -> Result<ReleasePayload, DecodeError>,
    ) -> Result<ReleasePayload, DecodeError> {
        let mut hasher = self.key.build_hasher();
        hasher.write_u8(u8::from(storage == Storage::Secret));
        hasher.write_usize(limits.max_decoded_bytes);
        hasher.write(stored);
        let key: Key = (hasher.finish(), stored.len());
        if let Some(known) = self.lock().0.get(&key) {
            match known {
                Ok(payload) if payload.content.is_some() || fingerprinting == Fingerprinting::Skip => {
                    return Ok(payload.clone());
                }
                Err(error) => return Err(error.clone()),
                Ok(_) => {}
            }
        }
        let result = read();
        let reading = result.clone();
        let mut state = self.lock();
        let (map, order) = &mut *state;
        if map.insert(key, reading).is_none() {
            order.push_back(key);
            while order.len() > self.capacity {
                if let Some(oldest) = order.pop_front() {
                    map.remove(&oldest);
                }
            }
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<Key, Reading>, VecDeque<Key>)> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Readings remembered (for the tests of the bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::decode::codec::{encode_secret_payload, read_payload};

    #[test]
    fn a_payload_is_read_once_and_answered_from_memory_after() {
        let memo = PayloadMemo::new(2);
        let stored = encode_secret_payload(br#"{"name":"a","version":3,"info":{"status":"deployed"}}"#);
        let limits = DecodeLimits::default();
        let mut reads = 0;
        for _ in 0..3 {
            let payload = memo
                .read(&stored, Storage::Secret, limits, Fingerprinting::Skip, || {
                    reads += 1;
                    read_payload(&stored, Storage::Secret, limits, Fingerprinting::Skip)
                })
                .unwrap();
            assert_eq!(payload.version, 3);
        }
        assert_eq!(reads, 1);
        // Wanting the fingerprint reads again, once.
        for _ in 0..2 {
            let payload = memo.read(&stored, Storage::Secret, limits, Fingerprinting::Take, || {
                reads += 1;
                read_payload(&stored, Storage::Secret, limits, Fingerprinting::Take)
            });
            assert!(payload.unwrap().content.is_some());
        }
        assert_eq!(reads, 2);
    }

    #[test]
    fn unreadable_payloads_are_remembered_too_and_the_memo_is_bounded() {
        let memo = PayloadMemo::new(2);
        let limits = DecodeLimits::default();
        let bad = encode_secret_payload(br#"{"name":"a","version":"3","info":{}}"#);
        let first = memo
            .read(&bad, Storage::Secret, limits, Fingerprinting::Skip, || {
                read_payload(&bad, Storage::Secret, limits, Fingerprinting::Skip)
            })
            .unwrap_err();
        let again = memo
            .read(&bad, Storage::Secret, limits, Fingerprinting::Skip, || panic!("read again"))
            .unwrap_err();
        assert_eq!(first.to_string(), again.to_string());
        for n in 0..5 {
            let text = format!(r#"{{"name":"a","version":{n},"info":{{"status":"deployed"}}}}"#);
            let stored = encode_secret_payload(text.as_bytes());
            let _ = memo.read(&stored, Storage::Secret, limits, Fingerprinting::Skip, || {
                read_payload(&stored, Storage::Secret, limits, Fingerprinting::Skip)
            });
        }
        assert_eq!(memo.len(), 2);
    }
}
