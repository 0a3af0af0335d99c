//! The producer threads and the chaos thread (partition additions, new
//! topics under live pattern subscriptions).

use super::*;

/// How a producer thread's producer is set up.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// Defaults (acks=1, sticky), one producer shared by two threads.
    Shared,
    /// `linger_ms` 2, small batches, lz4, round-robin.
    Lingering,
    /// `acks=all`, snappy.
    Durable,
}

pub(crate) fn producer_config(kind: Kind) -> ProducerConfig {
    match kind {
        Kind::Shared => ProducerConfig::default(),
        Kind::Lingering => ProducerConfig::default()
            .linger_ms(2)
            .batch_size(2048)
            .compression(Compression::Lz4)
            .partitioner(Partitioner::RoundRobin),
        Kind::Durable => ProducerConfig::default()
            .acks(Acks::All)
            .compression(Compression::Snappy),
    }
}

/// Records per second one producer thread sends at most.
pub(crate) fn rate_per_producer() -> f64 {
    if cfg!(debug_assertions) {
        2000.0
    } else {
        5000.0
    }
}

pub(crate) fn producer_thread(
    sh: Arc<Shared>,
    source: u16,
    kind: Kind,
    shared: Option<Arc<Producer>>,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let own = shared.is_none();
    let new_producer = || match sh.mq.producer(producer_config(kind)) {
        Ok(p) => Arc::new(p),
        Err(e) => panic!("creating a producer: {e}"),
    };
    let mut producer = shared.unwrap_or_else(new_producer);
    let linger_ms = producer.config().linger_ms;
    let mut counter = 0u64;
    let mut topics: Vec<(String, u32)> = Vec::new();
    let start = Instant::now();
    let rate = rate_per_producer();
    let mut iteration = 0u64;
    let mut follow_up: Option<(String, u32)> = None;
    while !sh.stop_producers.load(Ordering::Acquire) {
        if iteration.is_multiple_of(32) {
            topics = sh
                .mq
                .topics()
                .into_iter()
                .filter_map(|t| {
                    let n = sh.mq.topic(&t).ok()?.partitions.len() as u32;
                    Some((t, n))
                })
                .collect();
        }
        iteration += 1;
        let (mut topic, count) = topics[rng.range(0, topics.len() as u64) as usize].clone();
        let mut mode = rng.range(0, 10);
        // Asynchronous bursts are longer: they fill batches that a later
        // blocking send to the same partition must not overtake.
        let n = rng.range(1, if mode >= 7 { 40 } else { 12 });
        // Half the time the whole burst goes to one partition (a hot one).
        let mut hot = (rng.range(0, 2) == 0).then(|| rng.range(0, u64::from(count)) as u32);
        // Half the time, an asynchronous burst to a hot partition is
        // followed by blocking sends to it (which must land after it).
        if let Some((t, p)) = follow_up.take() {
            if rng.range(0, 2) == 0 {
                (topic, hot, mode) = (t, Some(p), rng.range(0, 7));
            }
        }
        if let (Some(p), 7..) = (hot, mode) {
            follow_up = Some((topic.clone(), p));
        }
        let mut records = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut r = Record::new(topic.as_str()).value(payload(source, counter));
            match (hot, rng.range(0, 10)) {
                (Some(p), _) => r = r.partition(p),
                (None, 0..=3) => r = r.partition(rng.range(0, u64::from(count)) as u32),
                (None, 4..=6) => r = r.key(format!("k{}", rng.range(0, 37))),
                _ => {}
            }
            records.push((r, counter));
            counter += 1;
        }
        match mode {
            0..=3 => {
                for (r, ctr) in records {
                    match producer.send(r) {
                        Ok(md) => sh.ack(&md, source, ctr),
                        Err(e) => sh.violation(format!("producer {source}: send: {e}")),
                    }
                    sh.bump(&sh.ops.sends, 1);
                }
            }
            4..=6 => {
                let borrowed: Vec<_> = records.iter().map(|(r, _)| r.as_borrowed()).collect();
                match producer.send_batch(&borrowed) {
                    Ok(mds) => {
                        for (md, (_, ctr)) in mds.iter().zip(&records) {
                            sh.ack(md, source, *ctr);
                        }
                    }
                    Err(e) => sh.violation(format!("producer {source}: send_batch: {e}")),
                }
                sh.bump(&sh.ops.batch_sends, 1);
            }
            _ => {
                for (r, ctr) in records {
                    let sh2 = Arc::clone(&sh);
                    let res = producer.send_async(r, move |res| {
                        match res {
                            Ok(md) => sh2.ack(&md, source, ctr),
                            Err(e) => {
                                sh2.violation(format!("producer {source}: delivery of {ctr}: {e}"));
                            }
                        }
                        sh2.bump(&sh2.ops.async_done, 1);
                    });
                    match res {
                        Ok(()) => sh.bump(&sh.ops.async_sent, 1),
                        Err(e) => sh.violation(format!("producer {source}: send_async: {e}")),
                    }
                }
            }
        }
        if own && rng.range(0, 300) == 0 {
            if let Err(e) = producer.flush() {
                sh.violation(format!("producer {source}: flush: {e}"));
            }
            drop(producer);
            producer = new_producer();
            sh.bump(&sh.ops.producer_restarts, 1);
        }
        if linger_ms > 0 && rng.range(0, 2) == 0 {
            // Pause around the linger deadline, so that sends meet the
            // background thread appending lingering batches.
            std::thread::sleep(Duration::from_micros(rng.range(0, 2000 * linger_ms)));
        }
        // Bursts: send freely until 200 records ahead of the rate, then
        // sleep off the excess.
        let budget = start.elapsed().as_secs_f64() * rate;
        if counter as f64 > budget + 200.0 {
            std::thread::sleep(Duration::from_secs_f64((counter as f64 - budget) / rate));
        }
    }
    if let Err(e) = producer.flush() {
        sh.violation(format!("producer {source}: final flush: {e}"));
    }
}

/// Adds partitions, creates topics matching the pattern, wakes consumers.
pub(crate) fn chaos_thread(sh: Arc<Shared>, seed: u64, max_dyn_topics: u32) {
    let mut rng = Rng::new(seed);
    let mut dyn_topics = 0u32;
    while !sh.stop_producers.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
        match rng.range(0, 100) {
            0..=39 => {
                let topics = sh.mq.topics();
                let t = &topics[rng.range(0, topics.len() as u64) as usize];
                let max = if t.starts_with("dyn-") {
                    DYN_MAX_PARTITIONS
                } else {
                    STATIC_MAX_PARTITIONS
                };
                let Ok(info) = sh.mq.topic(t) else { continue };
                let n = info.partitions.len() as u32;
                if n < max {
                    let to = (n + rng.range(1, 3) as u32).min(max);
                    match sh.mq.add_partitions(t, to) {
                        Ok(()) => sh.bump(&sh.ops.partition_additions, 1),
                        Err(e) => sh.violation(format!("add_partitions({t}, {to}): {e}")),
                    }
                }
            }
            40..=54 if dyn_topics < max_dyn_topics => {
                let name = format!("dyn-{dyn_topics}");
                let config = TopicConfig::new(rng.range(1, 4) as u32).segment_bytes(SEGMENT_BYTES);
                match sh.mq.create_topic(&name, config) {
                    Ok(()) => sh.bump(&sh.ops.topics_created, 1),
                    Err(e) => sh.violation(format!("create_topic({name}): {e}")),
                }
                dyn_topics += 1;
            }
            _ => {
                let wakers = lock(&sh.wakers);
                wakers[rng.range(0, wakers.len() as u64) as usize].wakeup();
                drop(wakers);
                sh.bump(&sh.ops.wakeups, 1);
            }
        }
    }
}
