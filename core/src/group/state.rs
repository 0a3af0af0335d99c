//! A consumer group's membership and assignment as plain data, and the
//! rules that change it: joining, leaving, expiry of members that stopped
//! polling, the target assignment, and the hand-over of partitions.
//!
//! The same [`State`] is kept in memory (one process) or in the group's
//! state file (several processes, see `shared`): the rules do not depend
//! on where it lives. Times are milliseconds of the system's monotonic
//! clock ([`crate::clock::monotonic_ms`]), the same in every process.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::assign::{assign, Assignment, AssignmentStrategy, MemberInfo, TopicPartition};
use crate::error::{Error, Result};

/// The partition count of a topic (`None` when it does not exist).
pub(crate) type Counts<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// A member's wishes, given when it joins or changes its subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemberSpec {
    /// The topics it subscribes to (already resolved from a pattern).
    pub topics: Vec<String>,
    /// The group's strategy as this member asks for it.
    #[serde(with = "strategy_name")]
    pub strategy: AssignmentStrategy,
    /// Partitions it asks for (`by_config`).
    pub wanted: Vec<TopicPartition>,
    /// How long it may go without polling.
    #[serde(with = "duration_ms")]
    pub max_poll_interval: Duration,
}

/// One member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Member {
    /// What it asked for.
    pub spec: MemberSpec,
    /// When it last polled (monotonic ms).
    pub last_poll_ms: u64,
    /// Its slot in the group's shared page, where it records its polls
    /// without taking the group's lock (several processes only).
    #[serde(default)]
    pub slot: u32,
}

impl Member {
    /// When it must poll again by, not to be expelled (monotonic ms).
    pub(crate) fn deadline_ms(&self) -> u64 {
        let interval = u64::try_from(self.spec.max_poll_interval.as_millis()).unwrap_or(u64::MAX);
        self.last_poll_ms.saturating_add(interval)
    }
}

/// A group's membership and assignment.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// Bumped at every rebalance.
    pub generation: u64,
    /// The strategy every member asked for.
    #[serde(with = "strategy_name")]
    pub strategy: AssignmentStrategy,
    /// Partition counts the target was computed for.
    pub partitions: BTreeMap<String, u32>,
    /// Each member's partitions once the hand-over is done.
    pub target: Assignment,
    /// Who owns each partition now.
    #[serde(with = "owner_list")]
    pub owner: HashMap<TopicPartition, String>,
    /// The number in the next member's id.
    pub next_member: u64,
    /// Bumped at every rebalance and at every release of partitions: when
    /// it moves, members may have something to do.
    #[serde(default)]
    pub changes: u64,
}

/// What a member must do to match the group's target.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Handover {
    /// The generation this answer belongs to.
    pub generation: u64,
    /// Owned partitions that are no longer the member's: revoke them, then
    /// release them.
    pub revoke: Vec<TopicPartition>,
    /// Partitions the member now owns (already recorded as its own).
    pub acquired: Vec<TopicPartition>,
}

impl State {
    /// Adds a member (id `<client>-<number>`, unique in the group) and
    /// rebalances; returns its id.
    pub(crate) fn join(
        &mut self,
        group: &str,
        client: &str,
        spec: MemberSpec,
        counts: Counts<'_>,
        now_ms: u64,
        slot: u32,
    ) -> Result<String> {
        if !self.members.is_empty() && self.strategy != spec.strategy {
            return Err(Error::InvalidArgument(format!(
                "group {group:?} uses the {} strategy; this member asks for {}",
                self.strategy, spec.strategy
            )));
        }
        self.strategy = spec.strategy;
        let id = self.next_id(client);
        self.next_member += 1;
        self.members.insert(
            id.clone(),
            Member {
                spec,
                last_poll_ms: now_ms,
                slot,
            },
        );
        self.rebalance(counts);
        Ok(id)
    }

    /// The id the next member from `client` gets.
    pub(crate) fn next_id(&self, client: &str) -> String {
        format!("{}-{:010}", client, self.next_member + 1)
    }

    /// Changes a member's subscription and rebalances.
    pub(crate) fn update(&mut self, id: &str, spec: MemberSpec, counts: Counts<'_>) {
        if let Some(m) = self.members.get_mut(id) {
            m.spec = spec;
            self.rebalance(counts);
        }
    }

    /// Removes members and everything they own, and rebalances when one
    /// was a member; returns whether any was.
    pub(crate) fn remove(&mut self, ids: &[String], counts: Counts<'_>) -> bool {
        let mut any = false;
        for id in ids {
            if self.members.remove(id).is_some() {
                self.owner.retain(|_, o| o != id);
                any = true;
            }
        }
        if any {
            self.rebalance(counts);
        }
        any
    }

    /// Partition counts of every topic some member subscribes to.
    fn partitions(&self, counts: Counts<'_>) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for m in self.members.values() {
            for t in &m.spec.topics {
                if !out.contains_key(t) {
                    if let Some(n) = counts(t) {
                        out.insert(t.clone(), n);
                    }
                }
            }
        }
        out
    }

    /// Whether the partition counts of the members' topics differ from
    /// those the target was computed for.
    pub(crate) fn partitions_changed(&self, counts: Counts<'_>) -> bool {
        self.partitions(counts) != self.partitions
    }

    /// Recomputes the target assignment and bumps the generation.
    fn rebalance(&mut self, counts: Counts<'_>) {
        let partitions = self.partitions(counts);
        let members: Vec<MemberInfo> = self
            .members
            .iter()
            .map(|(id, m)| MemberInfo {
                id: id.clone(),
                topics: m.spec.topics.clone(),
                wanted: m.spec.wanted.clone(),
            })
            .collect();
        // Sticky keeps what each member holds now.
        let mut previous: Assignment = HashMap::new();
        for (tp, o) in &self.owner {
            previous.entry(o.clone()).or_default().push(tp.clone());
        }
        for v in previous.values_mut() {
            v.sort();
        }
        self.target = assign(self.strategy, &members, &partitions, &previous);
        self.partitions = partitions;
        self.generation += 1;
        self.changes += 1;
    }

    /// The members other than `id` whose poll deadline passed at `now_ms`.
    pub(crate) fn expired(&self, id: &str, now_ms: u64) -> Vec<String> {
        self.members
            .iter()
            .filter(|(mid, m)| *mid != id && now_ms > m.deadline_ms())
            .map(|(mid, _)| mid.clone())
            .collect()
    }

    /// Member `id` polls: records the poll, removes members that stopped
    /// polling, rebalances if the partitions changed, and says what `id`
    /// must revoke and what it now owns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `id` is no longer a member.
    pub(crate) fn sync(
        &mut self,
        group: &str,
        id: &str,
        counts: Counts<'_>,
        now_ms: u64,
    ) -> Result<Handover> {
        match self.members.get_mut(id) {
            Some(m) => m.last_poll_ms = now_ms,
            None => {
                return Err(Error::InvalidArgument(format!(
                    "this consumer was removed from group {group:?} for not polling within max_poll_interval_ms; subscribe again"
                )))
            }
        }
        let expired = self.expired(id, now_ms);
        for mid in &expired {
            ::log::warn!(
                "group {group}: member {mid} did not poll within max_poll_interval_ms; removed"
            );
        }
        if !self.remove(&expired, counts) && self.partitions_changed(counts) {
            self.rebalance(counts);
        }
        Ok(self.handover(id))
    }

    /// What `id` must revoke, and the partitions of its target that nobody
    /// owns, which become its own.
    fn handover(&mut self, id: &str) -> Handover {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let mut revoke: Vec<TopicPartition> = self
            .owner
            .iter()
            .filter(|(tp, o)| *o == id && !target.contains(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        revoke.sort();
        let mut acquired = Vec::new();
        for tp in target {
            if !self.owner.contains_key(&tp) {
                self.owner.insert(tp.clone(), id.to_owned());
                acquired.push(tp);
            }
        }
        Handover {
            generation: self.generation,
            revoke,
            acquired,
        }
    }

    /// Member `id` gives up `partitions` (after revoking them).
    pub(crate) fn release(&mut self, id: &str, partitions: &[TopicPartition]) {
        for tp in partitions {
            if self.owner.get(tp).is_some_and(|o| o == id) {
                self.owner.remove(tp);
            }
        }
        self.changes += 1;
    }

    /// The earliest poll deadline of a member other than `id`.
    pub(crate) fn next_expiry_ms(&self, id: &str) -> Option<u64> {
        self.members
            .iter()
            .filter(|(mid, _)| *mid != id)
            .map(|(_, m)| m.deadline_ms())
            .min()
    }

    /// Whether `id` owns `tp`.
    pub(crate) fn owns(&self, id: &str, tp: &TopicPartition) -> bool {
        self.owner.get(tp).is_some_and(|o| o == id)
    }

    /// The generation, the current members and what each owns.
    pub(crate) fn describe(&self) -> (u64, Vec<(String, Vec<TopicPartition>)>) {
        let mut owned: BTreeMap<String, Vec<TopicPartition>> = self
            .members
            .keys()
            .map(|k| (k.clone(), Vec::new()))
            .collect();
        for (tp, o) in &self.owner {
            owned.entry(o.clone()).or_default().push(tp.clone());
        }
        for v in owned.values_mut() {
            v.sort();
        }
        (self.generation, owned.into_iter().collect())
    }
}

/// An [`AssignmentStrategy`] as its name.
mod strategy_name {
    use super::AssignmentStrategy;
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `with` signature
    pub(super) fn serialize<S: Serializer>(
        s: &AssignmentStrategy,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<AssignmentStrategy, D::Error> {
        let name = String::deserialize(de)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A [`Duration`] as whole milliseconds.
mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(de)?))
    }
}

/// The owner map as a list of `[topic, partition, member]` (JSON object
/// keys must be strings).
mod owner_list {
    use super::TopicPartition;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::HashMap;

    pub(super) fn serialize<S: Serializer>(
        m: &HashMap<TopicPartition, String>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        let mut v: Vec<(&str, u32, &str)> = m
            .iter()
            .map(|((t, p), o)| (t.as_str(), *p, o.as_str()))
            .collect();
        v.sort_unstable();
        v.serialize(ser)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<HashMap<TopicPartition, String>, D::Error> {
        let v: Vec<(String, u32, String)> = Vec::deserialize(de)?;
        Ok(v.into_iter().map(|(t, p, o)| ((t, p), o)).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(topics: &[&str]) -> MemberSpec {
        MemberSpec {
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            strategy: AssignmentStrategy::default(),
            wanted: Vec::new(),
            max_poll_interval: Duration::from_secs(1),
        }
    }

    fn four(t: &str) -> Option<u32> {
        (t == "t").then_some(4)
    }

    #[test]
    fn state_survives_a_round_trip_through_json() {
        let mut st = State::default();
        let a = st.join("g", "c", spec(&["t"]), &four, 10, 0).unwrap();
        let b = st.join("g", "c", spec(&["t"]), &four, 10, 1).unwrap();
        st.sync("g", &a, &four, 20).unwrap();
        st.sync("g", &b, &four, 20).unwrap();
        let json = serde_json::to_vec(&st).unwrap();
        let back: State = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, st);
        assert_eq!(back.owner.len(), 4);
    }

    #[test]
    fn a_member_past_its_deadline_is_removed_by_the_next_poll_of_another() {
        let mut st = State::default();
        let a = st.join("g", "c", spec(&["t"]), &four, 0, 0).unwrap();
        let b = st.join("g", "c", spec(&["t"]), &four, 0, 1).unwrap();
        st.sync("g", &a, &four, 500).unwrap();
        st.sync("g", &b, &four, 500).unwrap();
        assert_eq!(st.next_expiry_ms(&a), Some(1500));
        let gen = st.generation;
        let h = st.sync("g", &a, &four, 1501).unwrap();
        assert!(!st.members.contains_key(&b));
        assert_eq!(st.generation, gen + 1);
        assert_eq!(h.acquired.len(), 2, "{h:?}");
        assert!(st.sync("g", &b, &four, 1502).is_err());
    }
}
