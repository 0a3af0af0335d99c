//! Which boot of the machine this is: shared pages and the page cache last
//! only as long as one boot, so a directory last written in an earlier one
//! may hold stale pages and files whose unsynced pages were lost.

/// Where Linux gives a random id, new at each boot.
const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id; `None` when the system does not say (then no two boots
/// can be told apart).
pub(crate) fn boot_id() -> Option<u128> {
    if let Some(id) = crate::faults::boot_id() {
        return Some(id);
    }
    let text = std::fs::read_to_string(BOOT_ID_FILE).ok()?;
    parse(&text)
}

/// The 128 bits of a UUID written in hex with dashes; `None` for anything
/// else, or for zero (which marks "no boot" in the pages).
fn parse(text: &str) -> Option<u128> {
    let hex: String = text.trim().chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().filter(|&id| id != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_parses_and_anything_else_does_not() {
        assert_eq!(
            parse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n"),
            Some(0x0f1e_2d3c_4b5a_6978_8796_a5b4_c3d2_e1f0)
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse("00000000-0000-0000-0000-000000000000"), None);
        assert_eq!(parse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1"), None);
        assert_eq!(parse("zz1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"), None);
    }

    #[test]
    fn this_machine_says_which_boot_it_is() {
        if cfg!(target_os = "linux") && std::path::Path::new(BOOT_ID_FILE).exists() {
            assert!(boot_id().is_some());
        }
    }
}
