//! Bad input is a typed error that names the problem and changes nothing in the store; every
//! limit is tested at the limit and one past it.
#![allow(clippy::unwrap_used, reason = "tests")]

use tuplekv_engine::{Database, Entry, Key, KeyPart, ListOptions, Selector};
use tuplekv_sequence::limits::{
    FORMAT_SIZE_MAX, NUMBER_MAX, PREFIX_SIZE_MAX, ROOT_SIZE_MAX, WIDTH_MAX,
};
use tuplekv_sequence::{
    AtMax, CodeError, Error, Mode, OptionsError, PrefixError, SequenceOptions, Sequences,
};

fn everything(db: &Database) -> Vec<Entry> {
    db.list(&Selector::prefix(&Key::empty()), ListOptions::default())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Runs `f`, which must fail, and checks that the store did not change.
fn fails_without_change<T: std::fmt::Debug>(
    db: &Database,
    f: impl FnOnce() -> Result<T, Error>,
) -> Error {
    let before = everything(db);
    let err = f().unwrap_err();
    assert_eq!(everything(db), before, "{err} changed the store");
    err
}

fn setup() -> (Database, Sequences<Database>) {
    let db = Database::in_memory();
    let seqs = Sequences::new(db.clone());
    seqs.create("INFO", SequenceOptions::default()).unwrap();
    (db, seqs)
}

#[test]
fn unknown_sequences_and_wrong_modes_are_named() {
    let (db, seqs) = setup();
    let err = fails_without_change(&db, || seqs.fast("NOPE"));
    assert_eq!(
        err,
        Error::UnknownSequence {
            prefix: "NOPE".into()
        }
    );
    assert_eq!(
        err.to_string(),
        r#"no sequence named "NOPE": create it first"#
    );
    let err = fails_without_change(&db, || seqs.gapless("INFO"));
    assert_eq!(
        err,
        Error::WrongMode {
            prefix: "INFO".into(),
            expected: Mode::Gapless,
            actual: Mode::Fast
        }
    );
}

#[test]
fn creating_again_is_idempotent_but_other_options_are_refused() {
    let (db, seqs) = setup();
    seqs.create("INFO", SequenceOptions::default()).unwrap();
    let other = SequenceOptions {
        width: 4,
        ..Default::default()
    };
    let err = fails_without_change(&db, || seqs.create("INFO", other));
    assert_eq!(
        err,
        Error::AlreadyExists {
            prefix: "INFO".into()
        }
    );
}

#[test]
fn invalid_prefixes_are_refused_everywhere() {
    let (db, seqs) = setup();
    let cases = [
        ("", PrefixError::Empty),
        ("IN FO", PrefixError::BadChar(' ')),
        ("IN\0FO", PrefixError::BadChar('\0')),
        ("IN{n}", PrefixError::BadChar('{')),
        ("ERR2", PrefixError::EndsWithDigit),
    ];
    for (prefix, reason) in cases {
        let expected = Error::InvalidPrefix {
            prefix: prefix.into(),
            reason,
        };
        let create = || seqs.create(prefix, SequenceOptions::default());
        assert_eq!(fails_without_change(&db, create), expected);
        assert_eq!(fails_without_change(&db, || seqs.fast(prefix)), expected);
        assert_eq!(
            fails_without_change(&db, || seqs.counter_key(prefix)),
            expected
        );
    }
}

#[test]
fn prefix_size_max_is_the_longest_prefix() {
    let (db, seqs) = setup();
    let longest = "P".repeat(PREFIX_SIZE_MAX);
    seqs.create(&longest, SequenceOptions::default()).unwrap();
    assert_eq!(
        seqs.fast(&longest).unwrap().next().unwrap().code(),
        format!("{longest}001")
    );
    let past = "P".repeat(PREFIX_SIZE_MAX + 1);
    let err = fails_without_change(&db, || seqs.create(&past, SequenceOptions::default()));
    let reason = PrefixError::TooLong {
        size: PREFIX_SIZE_MAX + 1,
    };
    assert_eq!(
        err,
        Error::InvalidPrefix {
            prefix: past,
            reason
        }
    );
    assert!(err.to_string().ends_with("it is 65 bytes, max is 64"));
}

#[test]
fn root_size_max_is_the_longest_root() {
    // A bytes part of n payload bytes encodes to n + 2 bytes.
    let root = |size: usize| Key::new(vec![KeyPart::Bytes(vec![7; size - 2])]).unwrap();
    let db = Database::in_memory();
    let seqs = Sequences::with_root(db.clone(), &root(ROOT_SIZE_MAX)).unwrap();
    // The longest key it writes (a uniqueness key) still fits the engine's limit.
    let longest = "P".repeat(PREFIX_SIZE_MAX);
    let options = SequenceOptions {
        start: NUMBER_MAX,
        width: WIDTH_MAX,
        ..Default::default()
    };
    seqs.create(&longest, options).unwrap();
    let handle = seqs.fast(&longest).unwrap();
    let issued = handle.next().unwrap();
    handle
        .record(issued.number(), tuplekv_sequence::Record::new())
        .unwrap();
    let err = Sequences::with_root(db, &root(ROOT_SIZE_MAX + 1)).unwrap_err();
    assert_eq!(
        err,
        Error::RootTooLarge {
            size: ROOT_SIZE_MAX + 1
        }
    );
}

#[test]
fn width_max_and_number_max_bound_the_options() {
    let (db, seqs) = setup();
    let ok = |o: SequenceOptions| seqs.create("OK", o);
    ok(SequenceOptions {
        width: WIDTH_MAX,
        start: NUMBER_MAX,
        ..Default::default()
    })
    .unwrap();
    let bad = [
        (
            SequenceOptions {
                width: 0,
                ..Default::default()
            },
            OptionsError::Width { width: 0 },
        ),
        (
            SequenceOptions {
                width: WIDTH_MAX + 1,
                ..Default::default()
            },
            OptionsError::Width {
                width: WIDTH_MAX + 1,
            },
        ),
        (
            SequenceOptions {
                start: NUMBER_MAX + 1,
                ..Default::default()
            },
            OptionsError::NumberTooLarge {
                what: "start",
                value: NUMBER_MAX + 1,
            },
        ),
        (
            SequenceOptions {
                max: Some(NUMBER_MAX + 1),
                at_max: AtMax::Error,
                ..Default::default()
            },
            OptionsError::NumberTooLarge {
                what: "max",
                value: NUMBER_MAX + 1,
            },
        ),
        (
            SequenceOptions {
                start: 10,
                max: Some(9),
                at_max: AtMax::Error,
                ..Default::default()
            },
            OptionsError::MaxBelowStart { start: 10, max: 9 },
        ),
        (
            // A widening sequence counts past any max: setting one is a mistake, not a limit.
            SequenceOptions {
                max: Some(500),
                ..Default::default()
            },
            OptionsError::MaxWithWiden { max: 500 },
        ),
    ];
    for (options, reason) in bad {
        let err = fails_without_change(&db, || seqs.create("BAD", options.clone()));
        assert_eq!(err, Error::InvalidOptions(reason), "{options:?}");
    }
}

#[test]
fn format_size_max_is_the_longest_template() {
    let (db, seqs) = setup();
    let longest = format!("{{prefix}}{}{{n}}", "x".repeat(FORMAT_SIZE_MAX - 11));
    let options = SequenceOptions {
        format: longest,
        ..Default::default()
    };
    seqs.create("LONG", options).unwrap();
    let past = format!("{{prefix}}{}{{n}}", "x".repeat(FORMAT_SIZE_MAX - 10));
    let options = SequenceOptions {
        format: past,
        ..Default::default()
    };
    let err = fails_without_change(&db, || seqs.create("PAST", options));
    let reason = OptionsError::FormatTooLong {
        size: FORMAT_SIZE_MAX + 1,
    };
    assert_eq!(err, Error::InvalidOptions(reason));
    for bad in ["{prefix}", "{n}{n}", "{prefix}{num}"] {
        let options = SequenceOptions {
            format: bad.into(),
            ..Default::default()
        };
        let err = fails_without_change(&db, || seqs.create("FMT", options));
        assert!(
            matches!(err, Error::InvalidOptions(OptionsError::Format { .. })),
            "{err}"
        );
    }
}

#[test]
fn a_format_without_the_prefix_is_refused_naming_it() {
    let (db, seqs) = setup();
    for format in ["{n}", "N-{n}", "{n}.log"] {
        let options = SequenceOptions {
            format: format.into(),
            ..Default::default()
        };
        let err = fails_without_change(&db, || seqs.create("ERR", options));
        assert_eq!(
            err,
            Error::InvalidOptions(OptionsError::FormatWithoutPrefix {
                format: format.into()
            })
        );
        assert_eq!(
            err.to_string(),
            format!(
                "invalid options: format {format:?} has no {{prefix}}: sequences with \
                 different prefixes would make the same codes"
            )
        );
    }
}

#[test]
fn a_sequence_created_before_formats_needed_the_prefix_still_works() {
    let (db, seqs) = setup();
    // The definition as `create` stored it when a format needed only `{n}`.
    let legacy = "v1\nmode=fast\nstart=1\nwidth=3\nmax=999\nat_max=widen\nformat=N-{n}";
    db.set(
        &Key::new(vec!["__sequences".into(), "def".into(), "OLD".into()]).unwrap(),
        legacy.as_bytes(),
    )
    .unwrap();
    let options = SequenceOptions {
        format: "N-{n}".into(),
        ..Default::default()
    };
    // Creating it again with its own options is the no-op it always was.
    let before = everything(&db);
    seqs.create("OLD", options.clone()).unwrap();
    assert_eq!(everything(&db), before);
    assert_eq!(seqs.fast("OLD").unwrap().next().unwrap().code(), "N-001");
    // A new sequence cannot have that format.
    let err = fails_without_change(&db, || seqs.create("NEW", options));
    assert!(
        matches!(&err, Error::InvalidOptions(OptionsError::FormatWithoutPrefix { format }) if format == "N-{n}"),
        "{err}"
    );
}

#[test]
fn an_exhausted_sequence_fails_at_its_max_in_both_modes() {
    let (db, seqs) = setup();
    for (prefix, mode) in [("FAST", Mode::Fast), ("GAPLESS", Mode::Gapless)] {
        let options = SequenceOptions {
            mode,
            width: 1,
            at_max: AtMax::Error,
            ..Default::default()
        };
        seqs.create(prefix, options).unwrap();
        let codes: Vec<String> = match mode {
            Mode::Fast => {
                let h = seqs.fast(prefix).unwrap();
                let codes = (0..9).map(|_| h.next().unwrap().code()).collect();
                let err = fails_without_change(&db, || h.next().map(|i| i.number()));
                assert_eq!(
                    err,
                    Error::Exhausted {
                        prefix: prefix.into(),
                        max: 9
                    }
                );
                codes
            }
            Mode::Gapless => {
                let h = seqs.gapless(prefix).unwrap();
                let codes = (0..9).map(|_| h.next().unwrap().code()).collect();
                let err = fails_without_change(&db, || h.next().map(|i| i.number()));
                assert_eq!(
                    err,
                    Error::Exhausted {
                        prefix: prefix.into(),
                        max: 9
                    }
                );
                codes
            }
        };
        let expected: Vec<String> = (1..=9).map(|n| format!("{prefix}{n}")).collect();
        assert_eq!(codes, expected);
    }
}

#[test]
fn a_widening_sequence_grows_its_codes_and_stops_at_number_max() {
    let (db, seqs) = setup();
    let options = SequenceOptions {
        start: 998,
        ..Default::default()
    };
    seqs.create("W", options).unwrap();
    let h = seqs.fast("W").unwrap();
    let codes: Vec<String> = (0..3).map(|_| h.next().unwrap().code()).collect();
    assert_eq!(codes, ["W998", "W999", "W1000"]);
    assert_eq!(h.parse("W1000").unwrap(), 1000);

    let options = SequenceOptions {
        mode: Mode::Gapless,
        start: NUMBER_MAX,
        ..Default::default()
    };
    seqs.create("END", options).unwrap();
    let h = seqs.gapless("END").unwrap();
    assert_eq!(h.next().unwrap().number(), NUMBER_MAX);
    assert_eq!(h.parse(&format!("END{NUMBER_MAX}")).unwrap(), NUMBER_MAX);
    let err = fails_without_change(&db, || h.next().map(|i| i.number()));
    assert_eq!(
        err,
        Error::Exhausted {
            prefix: "END".into(),
            max: NUMBER_MAX
        }
    );
}

#[test]
fn codes_of_other_shapes_do_not_parse() {
    let (_db, seqs) = setup();
    let h = seqs.fast("INFO").unwrap();
    let cases = [
        ("WARN001", CodeError::Shape),
        ("INFO", CodeError::NotDigits),
        ("INFO-01", CodeError::NotDigits),
        ("INFO01", CodeError::Padding),
        ("INFO0001", CodeError::Padding),
        ("INFO9007199254740992", CodeError::TooLarge),
    ];
    for (code, reason) in cases {
        let err = h.parse(code).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidCode {
                prefix: "INFO".into(),
                code: code.into(),
                reason
            }
        );
    }
    assert_eq!(h.parse("INFO9007199254740991").unwrap(), NUMBER_MAX);
}

#[test]
fn a_corrupt_counter_is_reported_not_overwritten() {
    let (db, seqs) = setup();
    let counter = seqs.counter_key("INFO").unwrap();
    db.set_raw(&counter, b"not a number").unwrap();
    let h = seqs.fast("INFO").unwrap();
    let err = fails_without_change(&db, || h.next().map(|i| i.number()));
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}
