//! [`MessageId`]: one string naming one message of a data directory.
//!
//! The form is `<topic>:<partition>:<offset>`, e.g. `orders:3:1042`, with
//! the partition and offset in decimal without sign or leading zeros.
//! Topic names only hold ASCII letters, digits, `.`, `_` and `-`, so the
//! `:` separators are unambiguous, and parsing the string of an id gives
//! that id back (and the string of a parsed id is the string parsed).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::topic::MAX_TOPIC_NAME_LEN;

/// The unique id of a message: its topic, partition and offset (RocketMQ's
/// unique message id, Pulsar's `MessageId`), written and parsed as
/// `<topic>:<partition>:<offset>` (see [`MessageId::from_str`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The offset in the partition.
    pub offset: u64,
}

/// The longest string of an id: the longest topic name, two separators, a
/// `u32` and a `u64`. A buffer of this many bytes plus a terminator holds
/// any id.
pub const MAX_MESSAGE_ID_LEN: usize = MAX_TOPIC_NAME_LEN + 1 + 10 + 1 + 20;

impl MessageId {
    /// The id of the message at `offset` of `topic`'s `partition`.
    pub fn new(topic: impl Into<String>, partition: u32, offset: u64) -> MessageId {
        MessageId {
            topic: topic.into(),
            partition,
            offset,
        }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.topic, self.partition, self.offset)
    }
}

/// A canonical decimal number: digits only, no leading zero (but `0`).
fn decimal<T: FromStr>(s: &str) -> Option<T> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if canonical {
        s.parse().ok()
    } else {
        None
    }
}

impl FromStr for MessageId {
    type Err = Error;

    /// Parses `<topic>:<partition>:<offset>`: a topic of 1 to 249 ASCII
    /// letters, digits, `.`, `_` and `-`, and two decimal numbers without
    /// sign or leading zeros that fit a `u32` and a `u64`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything else.
    fn from_str(s: &str) -> Result<MessageId> {
        let bad = |why: &str| {
            let shown: String = s.chars().take(300).collect();
            Error::InvalidArgument(format!(
                "message id {shown:?} is malformed: {why} (expected <topic>:<partition>:<offset>)"
            ))
        };
        let mut parts = s.split(':');
        let (Some(topic), Some(partition), Some(offset), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it needs exactly two ':'"));
        };
        let topic_ok = !topic.is_empty()
            && topic.len() <= MAX_TOPIC_NAME_LEN
            && topic != "."
            && topic != ".."
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !topic_ok {
            return Err(bad("the topic is not a valid topic name"));
        }
        let partition = decimal(partition).ok_or_else(|| bad("the partition is not a number"))?;
        let offset = decimal(offset).ok_or_else(|| bad("the offset is not a number"))?;
        Ok(MessageId::new(topic, partition, offset))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_bad_ones_are_refused() {
        let id = MessageId::new("a.b_c-9", 4_294_967_295, u64::MAX);
        let s = id.to_string();
        assert_eq!(s, "a.b_c-9:4294967295:18446744073709551615");
        assert!(s.len() <= MAX_MESSAGE_ID_LEN);
        assert_eq!(s.parse::<MessageId>().unwrap(), id);
        assert_eq!(
            "t:0:0".parse::<MessageId>().unwrap(),
            MessageId::new("t", 0, 0)
        );
        for bad in [
            "",
            "t",
            "t:1",
            "t:1:2:3",
            ":1:2",
            "t::2",
            "t:1:",
            "t:01:2",
            "t:1:02",
            "t:+1:2",
            "t:-1:2",
            "t: 1:2",
            "t:1:2 ",
            "t/x:1:2",
            "..:1:2",
            "t:4294967296:0",
            "t:0:18446744073709551616",
            "é:1:2",
        ] {
            assert!(
                matches!(bad.parse::<MessageId>(), Err(Error::InvalidArgument(_))),
                "{bad:?} parsed"
            );
        }
        let long = format!("{}:0:0", "x".repeat(250));
        assert!(long.parse::<MessageId>().is_err());
    }
}
