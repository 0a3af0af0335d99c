use mqlite::*;
use std::time::Duration;
fn main() -> Result<()> {
    let dir = std::env::temp_dir().join("mqsmoke");
    let _ = std::fs::remove_dir_all(&dir);
    let mq = Broker::open(&dir, Config::default())?;
    mq.create_topic("orders", TopicConfig::new(2).segment_bytes(1 << 16))?;
    let p = mq.producer(ProducerConfig::default())?;
    for i in 0..5000 {
        p.send(Record::new("orders").key(format!("k{i}")).value(format!("v{i}")).header("h", "x"))?;
    }
    let mut c = mq.consumer(ConsumerConfig::group("g"))?;
    c.subscribe(&["orders"])?;
    let mut n = 0;
    loop { let m = c.poll(Duration::from_millis(50))?; if m.is_empty() { break } n += m.len(); }
    println!("consumed {n}; info {:?}", mq.topic("orders")?.partitions);
    assert!(matches!(Broker::open(&dir, Config::default()), Err(Error::Locked{..})));
    mq.close()?;
    let mq = Broker::open(&dir, Config::default())?;
    println!("reopened {:?}", mq.topic("orders")?.partitions);
    Ok(())
}
