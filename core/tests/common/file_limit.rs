//! A full disk modelled with a file-size limit (`RLIMIT_FSIZE`, with
//! `SIGXFSZ` ignored so that writes past it fail with `EFBIG`), for the
//! disk-full tests. The limit is process-wide: a test file using it holds a
//! single test.

use std::time::Duration;

use mqlite::{Broker, ConsumerConfig};

/// Sets the file-size limit to `bytes`, or back to the hard limit (`None`).
pub fn set_file_size_limit(bytes: Option<u64>) {
    // SAFETY: plain libc calls with valid arguments; `rlimit` is a local.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &raw mut lim), 0);
        lim.rlim_cur = bytes.unwrap_or(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &raw const lim), 0);
    }
}

/// Every value of partition 0 of `topic`, read from the start.
pub fn read_values(mq: &Broker, topic: &str) -> Vec<Vec<u8>> {
    let mut c = mq.consumer(ConsumerConfig::default()).unwrap();
    c.assign(&[(topic, 0)]).unwrap();
    let mut out = Vec::new();
    loop {
        let msgs = c.poll(Duration::from_millis(50)).unwrap();
        if msgs.is_empty() {
            return out;
        }
        out.extend(msgs.iter().map(|m| m.value().unwrap().to_vec()));
    }
}
