//! The parser and sampler on real /proc/diskstats text (tests/fixtures/).

use mergetune_kernel::diskstats::{LineFault, field, parse_diskstats};
use mergetune_logic::sampler::{Delta, Sampler};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn this_machine_6_18_has_17_fields() {
    let d = parse_diskstats(&fixture("diskstats_6.18_after_fio.txt"));
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_eq!(d.devices.len(), 10);
    assert!(d.devices.iter().all(|x| x.fields.field_count == 17));
    let loop0 = d.devices.iter().find(|x| x.name == "loop0").unwrap();
    assert_eq!(loop0.fields.get(field::WRITES_COMPLETED), 25520);
    assert_eq!(loop0.fields.get(field::WRITES_MERGED), 59472);
    let vda = d.devices.iter().find(|x| x.name == "vda").unwrap();
    assert_eq!((vda.major, vda.minor), (254, 0));
    assert_eq!(vda.fields.get(field::FLUSH_MS), 19);
}

#[test]
fn older_kernels_11_and_15_fields() {
    let d = parse_diskstats(&fixture("diskstats_mixed_kernels.txt"));
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let by = |n: &str| d.devices.iter().find(|x| x.name == n).unwrap().clone();
    assert_eq!(by("sda").fields.field_count, 11);
    assert_eq!(by("sda").fields.get(field::READS_MERGED), 34367663);
    assert_eq!(
        by("sda").fields.get(field::DISCARDS_COMPLETED),
        0,
        "absent fields read 0"
    );
    assert_eq!(by("sdb").fields.field_count, 15);
    assert_eq!(by("sdb").fields.get(field::SECTORS_DISCARDED), 1925173784);
    assert_eq!(by("sdc").fields.field_count, 17);
    assert_eq!(by("sdc").fields.get(field::FLUSHES_COMPLETED), 1555);
    assert_eq!(
        by("dm-0").fields.get(field::WRITES_MERGED),
        0,
        "bio-based dm never merges"
    );
}

#[test]
fn malformed_lines_are_reported_and_the_rest_parsed() {
    let mut text = fixture("diskstats_6.18_after_fio.txt");
    text.insert_str(0, "   8       0 sdx 1 2 3\ngarbage\n");
    text.push_str(" 254  16 vdb 1 2 3 4 5 6 7 8 9 10 eleven\n");
    let d = parse_diskstats(&text);
    assert_eq!(d.devices.len(), 10);
    assert_eq!(d.errors.len(), 3);
    assert_eq!(d.errors[0].line_no, 1);
    assert_eq!(d.errors[0].fault, LineFault::FieldCount { count: 3 });
    assert!(
        d.errors[0].to_string().contains("3 stat fields"),
        "{}",
        d.errors[0]
    );
    assert_eq!(d.errors[0].device.as_deref(), Some("sdx"));
    assert_eq!(d.errors[1].device, None, "no third column");
    assert!(
        d.errors[2].to_string().contains("eleven"),
        "{}",
        d.errors[2]
    );
}

#[test]
fn a_non_utf8_byte_costs_only_its_line() {
    let mut bytes = fixture("diskstats_6.18_after_fio.txt").into_bytes();
    bytes.extend_from_slice(b" 254 16 vd\xffb 1 2 3 4 5 6 7 8 9 10 11\n");
    bytes.extend_from_slice(b" 254 32 vdc 1 2 \xfe 4 5 6 7 8 9 10 11\n");
    let d = parse_diskstats(&bytes);
    assert_eq!(d.devices.len(), 10);
    assert_eq!(d.errors.len(), 2);
    assert_eq!(d.errors[0].fault, LineFault::NameNotUtf8);
    assert_eq!(d.errors[1].fault, LineFault::NotANumber { field: 3 });
    assert_eq!(d.errors[1].device.as_deref(), Some("vdc"));
}

#[test]
fn a_name_on_two_lines_is_set_aside_with_both_line_numbers() {
    let mut text = fixture("diskstats_6.18_after_fio.txt");
    let loop0 = text
        .lines()
        .find(|l| l.contains(" loop0 "))
        .unwrap()
        .to_string();
    text.push_str(&loop0.replace(" 7       0 ", " 7      99 "));
    text.push('\n');
    let d = parse_diskstats(&text);
    assert_eq!(d.devices.len(), 9, "both loop0 lines set aside");
    assert!(d.devices.iter().all(|x| x.name != "loop0"));
    assert_eq!(d.duplicates.len(), 1);
    assert_eq!(d.duplicates[0].name, "loop0");
    assert_eq!(d.duplicates[0].lines.len(), 2);
    assert_eq!(*d.duplicates[0].lines.last().unwrap(), text.lines().count());
}

#[test]
fn sampler_over_two_real_snapshots() {
    let a = parse_diskstats(&fixture("diskstats_6.18_vda_loop.txt"));
    let b = parse_diskstats(&fixture("diskstats_6.18_after_fio.txt"));
    let mut s = Sampler::new();
    s.observe(&a.devices);
    let set = s.observe(&b.devices);
    for (stat, d) in b.devices.iter().zip(&set.deltas) {
        assert!(matches!(d, Delta::Counters(_)), "{}: {d:?}", stat.name);
    }
    let i = b.devices.iter().position(|x| x.name == "loop0").unwrap();
    let Delta::Counters(c) = set.deltas[i] else {
        panic!()
    };
    assert!(c.writes_merged > 0);
    // Reversed order: everything that moved is a reset, never a huge delta.
    let mut s = Sampler::new();
    s.observe(&b.devices);
    let set = s.observe(&a.devices);
    let i = a.devices.iter().position(|x| x.name == "loop0").unwrap();
    assert_eq!(set.deltas[i], Delta::Reset);
}
