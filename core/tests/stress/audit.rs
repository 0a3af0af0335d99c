//! The final audit: every record in the log against what was acknowledged
//! and what every group consumed.

use super::*;

/// Reads every partition from the start and checks it against what the
/// producers were told: every record acknowledged at its offset with its
/// payload, and one producer thread's counters increasing with offset.
/// Returns the number of records in the log.
pub(crate) fn audit(sh: &Shared) -> u64 {
    let acks = lock(&sh.acks).clone();
    let mut total = 0u64;
    for t in sh.mq.topics() {
        let info = sh.mq.topic(&t).expect("topic");
        for p in &info.partitions {
            let tp = (t.clone(), p.partition);
            let end = p.end_offset;
            let empty = Vec::new();
            let acked = acks.get(&tp).unwrap_or(&empty);
            if acked.len() as u64 > end {
                sh.violation(format!(
                    "{t}/{}: records acknowledged up to offset {}, but the log ends at {end}",
                    p.partition,
                    acked.len() - 1
                ));
            }
            let mut c = sh
                .mq
                .consumer(ConsumerConfig::default().max_poll_records(5000))
                .expect("consumer");
            c.assign(&[(t.as_str(), p.partition)]).expect("assign");
            let mut next = 0u64;
            let mut last: HashMap<u16, u64> = HashMap::new();
            let mut bad = 0u32;
            let mut complain = |what: String| {
                bad += 1;
                if bad <= 5 {
                    sh.violation(what);
                }
            };
            while next < end {
                let msgs = match c.poll(Duration::ZERO) {
                    Ok(m) => m,
                    Err(e) => {
                        complain(format!("{t}/{}: reading at {next}: {e}", p.partition));
                        break;
                    }
                };
                if msgs.is_empty() {
                    complain(format!(
                        "{t}/{}: reading stopped at {next}, end {end}",
                        p.partition
                    ));
                    break;
                }
                for m in &msgs {
                    let o = m.offset();
                    if o != next {
                        complain(format!(
                            "{t}/{}: offset {o} where {next} was due",
                            p.partition
                        ));
                    }
                    next = o + 1;
                    let Some((source, counter)) = m.value().and_then(parse_payload) else {
                        complain(format!("{t}/{}: offset {o}: garbled value", p.partition));
                        continue;
                    };
                    match acked.get(o as usize) {
                        Some(&a) if a == pack(source, counter) => {}
                        Some(&NONE) | None => complain(format!(
                            "{t}/{}: offset {o} (producer {source} record {counter}) was never acknowledged",
                            p.partition
                        )),
                        Some(&a) => complain(format!(
                            "{t}/{}: offset {o} holds producer {source} record {counter}; producer {} record {} was acknowledged there",
                            p.partition,
                            a >> 48,
                            a & ((1 << 48) - 1)
                        )),
                    }
                    if let Some(prev) = last.insert(source, counter) {
                        if counter <= prev {
                            complain(format!(
                                "{t}/{}: offset {o}: producer {source} record {counter} after its record {prev}",
                                p.partition
                            ));
                        }
                    }
                }
            }
            total += next;
        }
    }
    total
}
