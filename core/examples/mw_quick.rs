use mqlite::{Broker, Config, ProducerConfig, Record, TopicConfig};
use std::time::Instant;
fn run(shared: bool, batch: usize, n: usize) -> f64 {
    let d = tempfile::tempdir().unwrap();
    let mq = Broker::open(d.path(), Config::default().shared(shared).prefault(false)).unwrap();
    mq.create_topic("t", TopicConfig::new(1)).unwrap();
    let p = mq.producer(ProducerConfig::default()).unwrap();
    let v = vec![7u8; 100];
    let t = Instant::now();
    if batch == 1 {
        for _ in 0..n {
            p.send(Record::new("t").partition(0).value(&v[..])).unwrap();
        }
    } else {
        for _ in 0..n / batch {
            let recs: Vec<mqlite::BorrowedRecord> = (0..batch)
                .map(|_| mqlite::BorrowedRecord {
                    topic: "t",
                    partition: Some(0),
                    key: None,
                    value: Some(&v[..]),
                    headers: &[],
                    timestamp: None,
                    sequence: None,
                })
                .collect();
            p.send_batch(&recs).unwrap();
        }
    }
    let r = n as f64 / t.elapsed().as_secs_f64();
    drop(p);
    mq.close().unwrap();
    r
}
fn main() {
    if let Ok(m) = std::env::var("MODE") {
        let r = run(m == "shared", 1, 50_000);
        println!("{m} {r:.0}");
        return;
    }
    for batch in [1usize, 100] {
        let n = if batch == 1 { 300_000 } else { 2_000_000 };
        let mut ex = vec![];
        let mut sh = vec![];
        for _ in 0..5 {
            ex.push(run(false, batch, n));
            sh.push(run(true, batch, n));
        }
        ex.sort_by(|a, b| a.partial_cmp(b).unwrap());
        sh.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "batch {batch}: exclusive {:.0} shared {:.0} ratio {:.2} (runs ex {:?} sh {:?})",
            ex[2],
            sh[2],
            sh[2] / ex[2],
            ex.iter().map(|x| (*x / 1000.0) as u64).collect::<Vec<_>>(),
            sh.iter().map(|x| (*x / 1000.0) as u64).collect::<Vec<_>>()
        );
    }
}
