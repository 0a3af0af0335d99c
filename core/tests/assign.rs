//! Partition assignment strategies: every subscribed partition has exactly
//! one owner, balance, determinism, and how much moves when a member joins
//! or leaves.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use mqlite::{
    assign, assign_consistent_hash, moved, Assignment, AssignmentStrategy, MemberInfo,
    DEFAULT_VIRTUAL_NODES,
};
use proptest::prelude::*;

use AssignmentStrategy::*;

const TOPICS: [&str; 5] = ["audit", "clicks", "orders", "payments", "users"];
/// Subscribed by some members but missing from the partition map.
const GHOST: &str = "ghost";

fn tp(t: &str, p: u32) -> (String, u32) {
    (t.to_owned(), p)
}

fn parts(counts: &[(&str, u32)]) -> BTreeMap<String, u32> {
    counts.iter().map(|&(t, n)| (t.to_owned(), n)).collect()
}

/// Member ids whose order differs from the order they are generated in.
fn member_id(i: usize) -> String {
    format!("c{:03}", (i * 41) % 101)
}

/// A random group: 1-5 topics of 0-64 partitions and 1-20 members with
/// random subscriptions (some empty, some to a topic that does not exist)
/// and random wanted partitions (some that do not exist).
fn group() -> impl Strategy<Value = (Vec<MemberInfo>, BTreeMap<String, u32>)> {
    let member = (0u8..64, prop::collection::vec((0usize..6, 0u32..70), 0..10));
    (
        prop::collection::vec(0u32..=64, 1..=5),
        prop::collection::vec(member, 1..=20),
    )
        .prop_map(|(counts, members)| {
            let topic = |i: usize| if i < 5 { TOPICS[i] } else { GHOST };
            let partitions = counts
                .iter()
                .enumerate()
                .map(|(i, &n)| (TOPICS[i].to_owned(), n))
                .collect();
            let members = members
                .into_iter()
                .enumerate()
                .map(|(i, (mask, wanted))| {
                    let topics = (0..6).filter(|b| mask & (1 << b) != 0).map(topic);
                    MemberInfo::new(member_id(i), topics)
                        .with_wanted(wanted.into_iter().map(|(t, p)| (topic(t), p)))
                })
                .collect();
            (members, partitions)
        })
}

/// A random previous assignment over the group's members, departed members,
/// unknown topics and partitions, with duplicates.
fn previous() -> impl Strategy<Value = Vec<(usize, usize, u32)>> {
    prop::collection::vec((0usize..25, 0usize..6, 0u32..70), 0..150)
}

fn make_previous(members: &[MemberInfo], raw: &[(usize, usize, u32)]) -> Assignment {
    let mut out = Assignment::new();
    for &(m, t, p) in raw {
        let id = members
            .get(m)
            .map_or_else(|| format!("gone-{m}"), |m| m.id.clone());
        let topic = if t < 5 { TOPICS[t] } else { GHOST };
        out.entry(id).or_default().push(tp(topic, p));
    }
    out
}

/// The same group with every member subscribing to every topic.
fn homogeneous() -> impl Strategy<Value = (Vec<MemberInfo>, BTreeMap<String, u32>)> {
    (prop::collection::vec(0u32..=64, 1..=5), 1usize..=20).prop_map(|(counts, n)| {
        let partitions: BTreeMap<String, u32> = counts
            .iter()
            .enumerate()
            .map(|(i, &c)| (TOPICS[i].to_owned(), c))
            .collect();
        let members = (0..n)
            .map(|i| MemberInfo::new(member_id(i), partitions.keys().cloned()))
            .collect();
        (members, partitions)
    })
}

/// The existing topics `m` subscribes to.
fn subscription<'a>(m: &'a MemberInfo, partitions: &BTreeMap<String, u32>) -> BTreeSet<&'a str> {
    m.topics
        .iter()
        .filter(|t| partitions.contains_key(*t))
        .map(String::as_str)
        .collect()
}

/// Checks the rules every strategy follows.
fn check_valid(
    strategy: AssignmentStrategy,
    members: &[MemberInfo],
    partitions: &BTreeMap<String, u32>,
    a: &Assignment,
) -> Result<(), TestCaseError> {
    let ids: BTreeSet<&str> = members.iter().map(|m| m.id.as_str()).collect();
    let keys: BTreeSet<&str> = a.keys().map(String::as_str).collect();
    prop_assert_eq!(&ids, &keys, "one entry per member");
    let mut owner: HashMap<(&str, u32), &str> = HashMap::new();
    for m in members {
        let list = &a[&m.id];
        prop_assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "sorted, no duplicates"
        );
        for (t, p) in list {
            prop_assert!(
                m.topics.contains(t),
                "{} got {t}/{p} without subscribing",
                m.id
            );
            prop_assert!(*p < partitions[t], "{t}/{p} does not exist");
            let before = owner.insert((t.as_str(), *p), m.id.as_str());
            prop_assert!(before.is_none(), "{t}/{p} owned twice");
        }
    }
    for (t, &n) in partitions {
        let subscribers: Vec<&MemberInfo> =
            members.iter().filter(|m| m.topics.contains(t)).collect();
        for p in 0..n {
            let expected = if strategy == ByConfig {
                // The smallest subscribed id that wants it, if any.
                subscribers
                    .iter()
                    .filter(|m| m.wanted.contains(&tp(t, p)))
                    .map(|m| m.id.as_str())
                    .min()
            } else if subscribers.is_empty() {
                None
            } else {
                owner.get(&(t.as_str(), p)).copied().or(Some("nobody"))
            };
            prop_assert_eq!(
                owner.get(&(t.as_str(), p)).copied(),
                expected,
                "{}/{}",
                t,
                p
            );
        }
    }
    Ok(())
}

fn count(a: &Assignment, id: &str) -> usize {
    a.get(id).map_or(0, Vec::len)
}

fn spread(values: impl IntoIterator<Item = usize>) -> usize {
    let v: Vec<usize> = values.into_iter().collect();
    v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0)
}

/// The fewest partitions that must change owner to share `total`
/// partitions over `kept.len()` members with identical subscriptions, when
/// member `i` already holds `kept[i]` of them: the busiest `total % members`
/// may keep one more than the others.
fn min_moves(mut kept: Vec<usize>, total: usize) -> usize {
    let (floor, extra) = (total / kept.len(), total % kept.len());
    kept.sort_unstable_by(|a, b| b.cmp(a));
    kept.iter()
        .enumerate()
        .map(|(i, &c)| c.saturating_sub(floor + usize::from(i < extra)))
        .sum()
}

fn changed_owner(before: &Assignment, after: &Assignment) -> Vec<((String, u32), String, String)> {
    let owners = |a: &Assignment| -> HashMap<(String, u32), String> {
        a.iter()
            .flat_map(|(m, ps)| ps.iter().map(move |p| (p.clone(), m.clone())))
            .collect()
    };
    let (b, a) = (owners(before), owners(after));
    let mut out: Vec<_> = b
        .into_iter()
        .filter_map(|(p, old)| match a.get(&p) {
            Some(new) if *new != old => Some((p, old, new.clone())),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

proptest! {
    // 256 cases (PROPTEST_CASES overrides); failing cases are printed, not
    // saved to a regressions file.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_partition_has_exactly_one_owner((members, partitions) in group(), raw in previous()) {
        let prev = make_previous(&members, &raw);
        for s in AssignmentStrategy::ALL {
            let a = assign(s, &members, &partitions, &prev);
            check_valid(s, &members, &partitions, &a)?;
        }
        for vnodes in [0, 1, 160] {
            let a = assign_consistent_hash(&members, &partitions, vnodes);
            check_valid(ConsistentHash, &members, &partitions, &a)?;
        }
    }

    #[test]
    fn members_with_identical_subscriptions_are_balanced(
        (members, partitions) in group(),
        raw in previous(),
    ) {
        let prev = make_previous(&members, &raw);
        let mut classes: BTreeMap<BTreeSet<&str>, Vec<&str>> = BTreeMap::new();
        for m in &members {
            classes.entry(subscription(m, &partitions)).or_default().push(&m.id);
        }
        let averagely = assign(Averagely, &members, &partitions, &prev);
        for (topic, ids) in &classes {
            for t in topic {
                let per_topic = ids.iter().map(|id| averagely[*id].iter().filter(|(x, _)| x == t).count());
                prop_assert!(spread(per_topic) <= 1, "averagely, topic {}", t);
            }
        }
        for s in [RoundRobin, Sticky] {
            let a = assign(s, &members, &partitions, &prev);
            for ids in classes.values() {
                prop_assert!(spread(ids.iter().map(|id| count(&a, id))) <= 1, "{}", s);
            }
        }
        // Sticky's stronger rule: no partition is held by a member with two
        // more partitions than another subscriber of its topic.
        let a = assign(Sticky, &members, &partitions, &prev);
        for m in &members {
            for (t, p) in &a[&m.id] {
                for other in members.iter().filter(|o| o.topics.contains(t)) {
                    prop_assert!(
                        count(&a, &m.id) <= count(&a, &other.id) + 1,
                        "{}/{} stays with {} though {} has two fewer", t, p, m.id, other.id
                    );
                }
            }
        }
    }

    #[test]
    fn result_does_not_depend_on_member_order(
        ((members, partitions), shuffled) in group().prop_flat_map(|(m, p)| {
            let s = Just(m.clone()).prop_shuffle();
            (Just((m, p)), s)
        }),
        raw in previous(),
    ) {
        let prev = make_previous(&members, &raw);
        for s in AssignmentStrategy::ALL {
            let a = assign(s, &members, &partitions, &prev);
            let b = assign(s, &shuffled, &partitions, &prev.clone().into_iter().collect());
            prop_assert_eq!(a, b, "{}", s);
        }
    }

    #[test]
    fn sticky_keeps_its_own_result((members, partitions) in group(), raw in previous()) {
        let first = assign(Sticky, &members, &partitions, &make_previous(&members, &raw));
        let again = assign(Sticky, &members, &partitions, &first);
        prop_assert_eq!(moved(&first, &again), 0);
        prop_assert_eq!(first, again);
    }

    #[test]
    fn sticky_join_moves_the_minimum((members, partitions) in homogeneous(), joiner in 0usize..101) {
        let before = assign(Sticky, &members, &partitions, &HashMap::new());
        let id = format!("j{joiner:03}");
        let mut grown = members.clone();
        grown.push(MemberInfo::new(id.clone(), partitions.keys().cloned()));
        let after = assign(Sticky, &grown, &partitions, &before);
        let mut kept: Vec<usize> = members.iter().map(|m| count(&before, &m.id)).collect();
        kept.push(0);
        let total = partitions.values().sum::<u32>() as usize;
        prop_assert_eq!(moved(&before, &after), min_moves(kept, total));
        for (p, _, to) in changed_owner(&before, &after) {
            prop_assert_eq!(&to, &id, "{:?} moved between old members", p);
        }
        prop_assert!(spread(grown.iter().map(|m| count(&after, &m.id))) <= 1);
    }

    #[test]
    fn sticky_moves_the_minimum_from_any_previous(
        (members, partitions) in homogeneous(),
        raw in previous(),
    ) {
        let prev = make_previous(&members, &raw);
        let after = assign(Sticky, &members, &partitions, &prev);
        // Each existing partition's previous owner (smallest id): current
        // members keep theirs where possible; departed members' must move.
        let mut owner: BTreeMap<(String, u32), &str> = BTreeMap::new();
        for (id, ps) in &prev {
            for (t, p) in ps {
                if partitions.get(t).is_some_and(|&n| *p < n) {
                    let o = owner.entry((t.clone(), *p)).or_insert(id);
                    *o = (*o).min(id.as_str());
                }
            }
        }
        let kept: Vec<usize> = members
            .iter()
            .map(|m| owner.values().filter(|o| **o == m.id).count())
            .collect();
        let departed = owner.values().filter(|o| o.starts_with("gone-")).count();
        let total = partitions.values().sum::<u32>() as usize;
        prop_assert_eq!(moved(&prev, &after), departed + min_moves(kept, total));
    }

    #[test]
    fn sticky_leave_moves_only_the_leavers_partitions(
        (members, partitions) in homogeneous(),
        leaver in any::<prop::sample::Index>(),
    ) {
        let before = assign(Sticky, &members, &partitions, &HashMap::new());
        let mut shrunk = members.clone();
        let gone = shrunk.remove(leaver.index(members.len()));
        let after = assign(Sticky, &shrunk, &partitions, &before);
        // Alone, the leaver's partitions have nobody to go to.
        let expected = if shrunk.is_empty() { 0 } else { count(&before, &gone.id) };
        prop_assert_eq!(moved(&before, &after), expected);
        for (p, from, _) in changed_owner(&before, &after) {
            prop_assert_eq!(&from, &gone.id, "{:?} moved between staying members", p);
        }
        prop_assert!(spread(shrunk.iter().map(|m| count(&after, &m.id))) <= 1);
    }

    #[test]
    fn consistent_hash_join_moves_only_to_the_new_member(
        (members, partitions) in group(),
        joiner in (0usize..101, 0u8..64),
    ) {
        let before = assign(ConsistentHash, &members, &partitions, &HashMap::new());
        let id = format!("j{:03}", joiner.0);
        let topics = TOPICS.iter().enumerate().filter(|(b, _)| joiner.1 & (1 << b) != 0);
        let mut grown = members.clone();
        grown.push(MemberInfo::new(id.clone(), topics.map(|(_, t)| *t)));
        let after = assign(ConsistentHash, &grown, &partitions, &before);
        for (p, _, to) in changed_owner(&before, &after) {
            prop_assert_eq!(&to, &id, "{:?} moved between old members", p);
        }
    }

    #[test]
    fn consistent_hash_leave_moves_only_the_leavers_partitions(
        (members, partitions) in group(),
        leaver in any::<prop::sample::Index>(),
    ) {
        let before = assign(ConsistentHash, &members, &partitions, &HashMap::new());
        let mut shrunk = members.clone();
        let gone = shrunk.remove(leaver.index(members.len()));
        let after = assign(ConsistentHash, &shrunk, &partitions, &before);
        for (p, from, _) in changed_owner(&before, &after) {
            prop_assert_eq!(&from, &gone.id, "{:?} moved between staying members", p);
        }
        // Every partition of the leaver whose topic someone else subscribes
        // to moved.
        let reassigned = before[&gone.id]
            .iter()
            .filter(|(t, _)| shrunk.iter().any(|m| m.topics.contains(t)))
            .count();
        prop_assert_eq!(moved(&before, &after), reassigned);
    }
}

#[test]
fn averagely_matches_kafka_range_example() {
    // The example of Kafka's RangeAssignor documentation.
    let members = [
        MemberInfo::new("C1", ["t0", "t1"]),
        MemberInfo::new("C0", ["t0", "t1"]),
    ];
    let a = assign(
        Averagely,
        &members,
        &parts(&[("t0", 3), ("t1", 3)]),
        &HashMap::new(),
    );
    assert_eq!(
        a["C0"],
        [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)]
    );
    assert_eq!(a["C1"], [tp("t0", 2), tp("t1", 2)]);
    // RocketMQ's averagely: 8 queues over 3 consumers are 3, 3, 2.
    let members = [
        MemberInfo::new("a", ["q"]),
        MemberInfo::new("b", ["q"]),
        MemberInfo::new("c", ["q"]),
    ];
    let a = assign(Averagely, &members, &parts(&[("q", 8)]), &HashMap::new());
    let q = |r: std::ops::Range<u32>| r.map(|p| tp("q", p)).collect::<Vec<_>>();
    assert_eq!((&a["a"], &a["b"], &a["c"]), (&q(0..3), &q(3..6), &q(6..8)));
}

#[test]
fn round_robin_matches_kafka_examples() {
    // Both examples of Kafka's RoundRobinAssignor documentation.
    let members = [
        MemberInfo::new("C0", ["t0", "t1"]),
        MemberInfo::new("C1", ["t0", "t1"]),
    ];
    let a = assign(
        RoundRobin,
        &members,
        &parts(&[("t0", 3), ("t1", 3)]),
        &HashMap::new(),
    );
    assert_eq!(a["C0"], [tp("t0", 0), tp("t0", 2), tp("t1", 1)]);
    assert_eq!(a["C1"], [tp("t0", 1), tp("t1", 0), tp("t1", 2)]);

    let members = [
        MemberInfo::new("C0", ["t0"]),
        MemberInfo::new("C1", ["t0", "t1"]),
        MemberInfo::new("C2", ["t0", "t1", "t2"]),
    ];
    let a = assign(
        RoundRobin,
        &members,
        &parts(&[("t0", 1), ("t1", 2), ("t2", 3)]),
        &HashMap::new(),
    );
    assert_eq!(a["C0"], [tp("t0", 0)]);
    assert_eq!(a["C1"], [tp("t1", 0)]);
    assert_eq!(
        a["C2"],
        [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)]
    );
}

#[test]
fn round_robin_stays_balanced_where_plain_dealing_does_not() {
    // A and C subscribe to the same topics, X to others, topics alternate:
    // plain dealing (Kafka) gives A every one of a0..a3 and C none.
    let members = [
        MemberInfo::new("A", ["a0", "a1", "a2", "a3"]),
        MemberInfo::new("C", ["a0", "a1", "a2", "a3"]),
        MemberInfo::new("X", ["b0", "b1", "b2", "b3"]),
    ];
    let partitions = parts(&[
        ("a0", 1),
        ("a1", 1),
        ("a2", 1),
        ("a3", 1),
        ("b0", 1),
        ("b1", 1),
        ("b2", 1),
        ("b3", 1),
    ]);
    let a = assign(RoundRobin, &members, &partitions, &HashMap::new());
    assert_eq!((a["A"].len(), a["C"].len(), a["X"].len()), (2, 2, 4));
}

#[test]
fn sticky_matches_kafka_sticky_example() {
    // Kafka's StickyAssignor documentation: C1 leaves a round-robin
    // assignment of four topics of two partitions over C0, C1, C2.
    let all = ["t0", "t1", "t2", "t3"];
    let partitions = parts(&[("t0", 2), ("t1", 2), ("t2", 2), ("t3", 2)]);
    let three = [
        MemberInfo::new("C0", all),
        MemberInfo::new("C1", all),
        MemberInfo::new("C2", all),
    ];
    let before = assign(RoundRobin, &three, &partitions, &HashMap::new());
    assert_eq!(before["C0"], [tp("t0", 0), tp("t1", 1), tp("t3", 0)]);
    assert_eq!(before["C1"], [tp("t0", 1), tp("t2", 0), tp("t3", 1)]);
    assert_eq!(before["C2"], [tp("t1", 0), tp("t2", 1)]);
    let two = [three[0].clone(), three[2].clone()];
    let after = assign(Sticky, &two, &partitions, &before);
    assert_eq!(
        after["C0"],
        [tp("t0", 0), tp("t1", 1), tp("t2", 0), tp("t3", 0)]
    );
    assert_eq!(
        after["C2"],
        [tp("t0", 1), tp("t1", 0), tp("t2", 1), tp("t3", 1)]
    );
    assert_eq!(moved(&before, &after), 3);
    // Round robin from scratch would move 5 of the 8.
    let plain = assign(RoundRobin, &two, &partitions, &HashMap::new());
    assert_eq!(moved(&before, &plain), 5);
}

#[test]
fn sticky_drops_partitions_of_unsubscribed_topics_and_places_new_ones() {
    let members = [
        MemberInfo::new("a", ["t", "u"]),
        MemberInfo::new("b", ["t"]),
    ];
    let previous = Assignment::from([
        ("a".to_owned(), vec![tp("t", 0), tp("t", 1), tp("gone", 0)]),
        // b lists t/1 too and no longer subscribes to u; t/9 is gone.
        (
            "b".to_owned(),
            vec![tp("t", 1), tp("t", 2), tp("u", 0), tp("t", 9)],
        ),
    ]);
    let partitions = parts(&[("t", 4), ("u", 2)]);
    let a = assign(Sticky, &members, &partitions, &previous);
    // a keeps t/0 and t/1 (the smaller id wins the duplicate), b keeps t/2;
    // u goes to a, its only subscriber, and t/3 (new) to b, the less loaded:
    // 4 against 2, so a hands t/1 to b.
    assert_eq!(a["a"], [tp("t", 0), tp("u", 0), tp("u", 1)]);
    assert_eq!(a["b"], [tp("t", 1), tp("t", 2), tp("t", 3)]);
    // u/0 moved from b to a and t/1 (a's before) to b.
    assert_eq!(moved(&previous, &a), 2);
}

#[test]
fn by_config_gives_only_wanted_partitions() {
    let members = [
        MemberInfo::new("b", ["t"]).with_wanted([("t", 0), ("t", 1)]),
        MemberInfo::new("a", ["t"]).with_wanted([("t", 1), ("t", 7), ("u", 0)]),
        MemberInfo::new("c", ["t", "u"]),
    ];
    let a = assign(
        ByConfig,
        &members,
        &parts(&[("t", 4), ("u", 1)]),
        &HashMap::new(),
    );
    // t/1 is wanted by a and b: a has the smaller id. t/7 does not exist; a
    // does not subscribe to u. t/2, t/3 and u/0 stay unassigned.
    assert_eq!(a["a"], [tp("t", 1)]);
    assert_eq!(a["b"], [tp("t", 0)]);
    assert_eq!(a["c"], []);
}

#[test]
fn members_listed_twice_are_merged() {
    let members = [
        MemberInfo::new("a", ["t"]),
        MemberInfo::new("b", ["t"]),
        MemberInfo::new("a", ["u"]),
    ];
    let a = assign(
        Averagely,
        &members,
        &parts(&[("t", 2), ("u", 1)]),
        &HashMap::new(),
    );
    assert_eq!(a.len(), 2);
    assert_eq!(a["a"], [tp("t", 0), tp("u", 0)]);
    assert_eq!(a["b"], [tp("t", 1)]);
}

#[test]
fn empty_groups_and_topics() {
    let none = assign(Sticky, &[], &parts(&[("t", 3)]), &HashMap::new());
    assert!(none.is_empty());
    for s in AssignmentStrategy::ALL {
        let a = assign(
            s,
            &[MemberInfo::new("a", ["t"])],
            &parts(&[("t", 0)]),
            &HashMap::new(),
        );
        assert_eq!(a["a"], [], "{s}");
    }
}

#[test]
fn consistent_hash_virtual_nodes() {
    let members: Vec<MemberInfo> = (0..4)
        .map(|i| MemberInfo::new(format!("m{i}"), ["t"]))
        .collect();
    let partitions = parts(&[("t", 32)]);
    let default = assign(ConsistentHash, &members, &partitions, &HashMap::new());
    assert_eq!(
        default,
        assign_consistent_hash(&members, &partitions, DEFAULT_VIRTUAL_NODES)
    );
    assert_eq!(
        assign_consistent_hash(&members, &partitions, 0),
        assign_consistent_hash(&members, &partitions, 1)
    );
}

#[test]
fn moved_counts_owner_changes_only() {
    let before = Assignment::from([
        ("a".to_owned(), vec![tp("t", 0), tp("t", 1)]),
        ("b".to_owned(), vec![tp("t", 2)]),
    ]);
    let after = Assignment::from([
        ("a".to_owned(), vec![tp("t", 0)]),
        // t/1 changed owner; t/3 is new; t/2 went unowned.
        ("c".to_owned(), vec![tp("t", 1), tp("t", 3)]),
    ]);
    assert_eq!(moved(&before, &after), 1);
    assert_eq!(moved(&after, &after), 0);
    assert_eq!(moved(&Assignment::new(), &after), 0);
}

#[test]
fn strategy_names_parse() {
    for s in AssignmentStrategy::ALL {
        assert_eq!(s.name().parse::<AssignmentStrategy>().unwrap(), s);
        assert_eq!(s.to_string(), s.name());
    }
    for (name, s) in [
        ("range", Averagely),
        ("by_circle", RoundRobin),
        ("Round-Robin", RoundRobin),
        ("cooperative-sticky", Sticky),
        ("CONSISTENT_HASH", ConsistentHash),
        ("by-config", ByConfig),
    ] {
        assert_eq!(name.parse::<AssignmentStrategy>().unwrap(), s);
    }
    assert_eq!(AssignmentStrategy::default(), Averagely);
    let err = "fair".parse::<AssignmentStrategy>().unwrap_err();
    assert!(err.to_string().contains("\"fair\""), "{err}");
}

/// A strategy as the tables below run it.
#[derive(Clone, Copy)]
enum Row {
    Strategy(AssignmentStrategy),
    Ring(u32),
}

impl Row {
    fn name(self) -> String {
        match self {
            Row::Strategy(ConsistentHash) => {
                format!("consistent_hash ({DEFAULT_VIRTUAL_NODES} virtual nodes)")
            }
            Row::Strategy(s) => s.name().to_owned(),
            Row::Ring(v) => format!("consistent_hash ({v} virtual nodes)"),
        }
    }

    fn run(
        self,
        members: &[MemberInfo],
        partitions: &BTreeMap<String, u32>,
        previous: &Assignment,
    ) -> Assignment {
        match self {
            Row::Strategy(s) => assign(s, members, partitions, previous),
            Row::Ring(v) => assign_consistent_hash(members, partitions, v),
        }
    }
}

/// Prints the tables of `docs/assignment.md`. Run with `--nocapture`.
///
/// Movement: 12 members subscribed to four topics of 16 partitions each;
/// `consumer-12` joins, or `consumer-05` or `consumer-00` leaves. Then the
/// balance of consistent hashing by number of virtual nodes.
#[test]
fn movement_table() {
    let partitions = &parts(&[("t0", 16), ("t1", 16), ("t2", 16), ("t3", 16)]);
    let topics: Vec<String> = partitions.keys().cloned().collect();
    let group: Vec<MemberInfo> = (0..13)
        .map(|i| MemberInfo::new(format!("consumer-{i:02}"), topics.clone()))
        .collect();
    // by_config: each member wants what averagely gives it in the group of
    // 12; the joining member wants nothing.
    let base = assign(Averagely, &group[..12], partitions, &HashMap::new());
    let configured: Vec<MemberInfo> = group
        .iter()
        .map(|m| {
            m.clone()
                .with_wanted(base.get(&m.id).cloned().unwrap_or_default())
        })
        .collect();
    let without = |members: &[MemberInfo], id: &str| -> Vec<MemberInfo> {
        members[..12]
            .iter()
            .filter(|m| m.id != id)
            .cloned()
            .collect()
    };
    let balance = |a: &Assignment| {
        let total = spread(a.values().map(Vec::len));
        let per_topic = topics
            .iter()
            .map(|t| {
                spread(
                    a.values()
                        .map(|ps| ps.iter().filter(|(x, _)| x == t).count()),
                )
            })
            .max()
            .unwrap_or(0);
        format!("{total} ({per_topic})")
    };
    let rows = [
        Row::Strategy(Averagely),
        Row::Strategy(RoundRobin),
        Row::Strategy(ConsistentHash),
        Row::Ring(10),
        Row::Strategy(Sticky),
        Row::Strategy(ByConfig),
    ];
    println!(
        "| strategy | moved on join (12 → 13) | moved on leave of consumer-05 (12 → 11) \
         | moved on leave of consumer-00 | max − min, total (per topic), 12 / 13 / 11 members \
         | unassigned after leave of consumer-05 |"
    );
    println!("|---|--:|--:|--:|---|--:|");
    for row in rows {
        let members = if matches!(row, Row::Strategy(ByConfig)) {
            &configured
        } else {
            &group
        };
        let before = row.run(&members[..12], partitions, &HashMap::new());
        let joined = row.run(members, partitions, &before);
        let left = row.run(&without(members, "consumer-05"), partitions, &before);
        let left_first = row.run(&without(members, "consumer-00"), partitions, &before);
        let assigned: usize = left.values().map(Vec::len).sum();
        println!(
            "| {} | {} | {} | {} | {} / {} / {} | {} |",
            row.name(),
            moved(&before, &joined),
            moved(&before, &left),
            moved(&before, &left_first),
            balance(&before),
            balance(&joined),
            balance(&left),
            64 - assigned,
        );
    }

    // Consistent hashing: the busiest member's share over the average, for
    // 12 members (ids `g{n}-consumer-{i}`, 40 groups) and one topic.
    println!();
    println!("| virtual nodes | 64 partitions: mean (worst) busiest / average | 1000 partitions: mean (worst) busiest / average |");
    println!("|--:|---|---|");
    for vnodes in [1, 10, 40, 100, 160] {
        let mut cells = Vec::new();
        for n in [64u32, 1000] {
            let partitions = parts(&[("t", n)]);
            let avg = f64::from(n) / 12.0;
            let ratios: Vec<f64> = (0..40)
                .map(|g| {
                    let members: Vec<MemberInfo> = (0..12)
                        .map(|i| MemberInfo::new(format!("g{g}-consumer-{i}"), ["t"]))
                        .collect();
                    let a = assign_consistent_hash(&members, &partitions, vnodes);
                    a.values().map(Vec::len).max().unwrap_or(0) as f64 / avg
                })
                .collect();
            let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
            let worst = ratios.iter().copied().fold(0.0, f64::max);
            cells.push(format!("{mean:.2} ({worst:.2})"));
        }
        println!("| {vnodes} | {} | {} |", cells[0], cells[1]);
    }
}
