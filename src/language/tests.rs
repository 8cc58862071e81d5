//! The construct table and the language's small grammars, checked.
/// Every form of the grammar's `on_reject`, its strings drawn from every character class
/// and every escape, is accepted; each is then broken the ways a string or a form can be
/// (an unknown escape, an unclosed string, a token after it, a control character, an
/// argument an action does not take), and each break is refused.
#[test]
fn an_on_reject_is_checked_against_the_grammar() {
    use super::check_on_reject;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(49);
    let pieces = [
        "a", "Z", " ", "é", "漢", "🚀", "'", "#", ":", "{", "}", ",", "!", "\\\\", "\\\"", "\\n",
        "\\t", "\\{", "\\}", "throw", "retry",
    ];
    let idents = ["draft", "_x", "step-2", "Étape", "a1"];
    let string = |rng: &mut rand::rngs::StdRng| {
        let n = rng.random_range(0..8);
        let body: String = (0..n)
            .map(|_| pieces[rng.random_range(0..pieces.len())])
            .collect();
        format!("\"{body}\"")
    };
    for _ in 0..400 {
        let s = string(&mut rng);
        let id = idents[rng.random_range(0..idents.len())];
        let forms = [
            "throw".to_string(),
            format!("throw {s}"),
            "retry".to_string(),
            format!("retry {id}"),
            "continue".to_string(),
            format!("session {s}"),
            format!("session: {id}"),
            format!("session {id}: {id}"),
            s.clone(),
        ];
        for form in &forms {
            let padded = format!("  {form} ");
            assert_eq!(check_on_reject(&padded), Ok(()), "{padded}");
        }
        // Broken strings, wherever a string stands.
        let body = &s[1..s.len() - 1];
        for bad in [
            format!("\"{body}\\q\""),
            format!("\"{body}"),
            format!("{s} trailing"),
            format!("{s} {s}"),
            format!("\"{body}\n\""),
            format!("\"{body}\u{7}\""),
        ] {
            for form in [
                bad.clone(),
                format!("throw {bad}"),
                format!("session {bad}"),
            ] {
                assert!(check_on_reject(&form).is_err(), "{form}");
            }
        }
        for bad in [
            format!("continue {id}"),
            format!("retry {id} {id}"),
            format!("retry {s}"),
            "session".to_string(),
            format!("session {id}"),
            format!("session: {s}"),
            format!("{id} later"),
            format!("throw {id}"),
        ] {
            assert!(check_on_reject(&bad).is_err(), "{bad}");
        }
    }
}

/// Every one-letter edit of an action (a deletion, an insertion, a substitution, two
/// letters swapped) and every other case of it reads as that action misspelled; the
/// action as written, a quoted message, and words far from every action do not.
#[test]
fn an_on_reject_a_letter_off_an_action_is_caught() {
    use super::{on_reject_near_miss, ON_REJECT_ACTIONS};
    let letters: Vec<char> = ('a'..='z').chain(['-', '_']).collect();
    for action in ON_REJECT_ACTIONS {
        let chars: Vec<char> = action.chars().collect();
        let mut edits = vec![
            action.to_uppercase(),
            format!("{}{}", chars[0].to_uppercase(), &action[1..]),
        ];
        for i in 0..=chars.len() {
            for c in &letters {
                let mut v = chars.clone();
                v.insert(i, *c);
                edits.push(v.into_iter().collect());
            }
            if i < chars.len() {
                let mut v = chars.clone();
                v.remove(i);
                edits.push(v.into_iter().collect());
                for c in &letters {
                    let mut v = chars.clone();
                    v[i] = *c;
                    edits.push(v.into_iter().collect());
                }
            }
            if i + 1 < chars.len() {
                let mut v = chars.clone();
                v.swap(i, i + 1);
                edits.push(v.into_iter().collect());
            }
        }
        for edit in edits.iter().filter(|e| *e != action) {
            let found = on_reject_near_miss(&format!("{edit} label"));
            // An edit of one action can be another action, or a letter off it.
            assert!(found.is_some(), "{edit}");
            if found != Some(action) {
                let other = found.unwrap();
                assert!(
                    strsim::osa_distance(&edit.to_lowercase(), other) <= 1,
                    "{edit}"
                );
            }
        }
        assert_eq!(on_reject_near_miss(action), None);
        assert_eq!(on_reject_near_miss(&format!("{action} \"why\"")), None);
        assert_eq!(on_reject_near_miss(&format!("\"{action}\"")), None);
        assert_eq!(
            on_reject_near_miss(&format!("'{edit}'", edit = action.to_uppercase())),
            None
        );
    }
    use super::string_value;
    assert_eq!(
        string_value(r#" "a\nb\t\"c\\ \{x\} é" "#).as_deref(),
        Some("a\nb\t\"c\\ {x} é")
    );
    assert_eq!(string_value(r#""a\q""#), None);
    assert_eq!(string_value("x"), None);
    for far in [
        "Deployment cancelled",
        "no",
        "three strikes",
        "\"retyr\"",
        "  ",
    ] {
        assert_eq!(on_reject_near_miss(far), None, "{far}");
    }
}

use super::*;

/// Every rule of the grammar that is a statement form (the alternatives of `statement`, the
/// clauses of compound statements, `branch`, the pipeline operations, arrow sequences and
/// program calls), as the grammar text names them.
fn grammar_forms() -> Vec<String> {
    let mut rules = Vec::new();
    for line in GRAMMAR.lines() {
        if let Some((name, _)) = line.split_once(":=") {
            rules.push(name.trim().to_string());
        }
    }
    let statement = GRAMMAR
        .split("statement :=")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("the grammar has a statement rule");
    let mut forms: Vec<String> = statement
        .split('|')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    // The clauses and the expressions that hold statements.
    for r in [
        "catch",
        "finally",
        "option",
        "elif",
        "else",
        "branch",
        "pipeOp",
        "arrowExpr",
        "programCall",
    ] {
        assert!(rules.iter().any(|n| n == r), "the grammar has no rule {r}");
        forms.push(r.to_string());
    }
    forms
}

#[test]
fn every_form_of_the_grammar_has_an_entry() {
    let forms = grammar_forms();
    assert!(forms.len() > 25, "read {} forms", forms.len());
    for f in forms {
        let rule = match f.as_str() {
            "branch" => "parallelBranch",
            other => other,
        };
        assert!(
            TABLE.iter().any(|e| e.rule == rule),
            "the grammar's {f} has no entry in the construct table"
        );
    }
    for (name, kind) in NAMES {
        assert_eq!(kind.name(), *name);
        kind.entry();
    }
    assert_eq!(NAMES.len(), TABLE.len());
}

#[test]
fn classified_by_the_leading_keyword() {
    let cases = [
        ("do refine(improved, depth - 1)", Some(Kind::Invoke)),
        ("let x = do refine(a)", Some(Kind::Invoke)),
        ("do:", Some(Kind::Do)),
        ("parallel:", Some(Kind::Parallel)),
        ("parallel (\"first\"):", Some(Kind::Parallel)),
        ("parallel:a", None),
        ("parallel for x in items:", Some(Kind::ParallelFor)),
        ("repeat 3 as i:", Some(Kind::Repeat)),
        ("for x in items:", Some(Kind::For)),
        ("loop until **done** (max: 5):", Some(Kind::Loop)),
        ("loop", None),
        ("try:", Some(Kind::Try)),
        ("catch as err:", Some(Kind::Catch)),
        ("finally:", Some(Kind::Finally)),
        ("throw \"no\"", Some(Kind::Throw)),
        ("choice **best**:", Some(Kind::Choice)),
        ("if **x**:", Some(Kind::If)),
        ("elif **y**:", Some(Kind::Elif)),
        ("else:", Some(Kind::Else)),
        ("let a = session \"x\"", Some(Kind::Let)),
        ("const a = \"x\"", Some(Kind::Const)),
        ("a = session \"x\"", Some(Kind::Assign)),
        ("a = parallel:", Some(Kind::Parallel)),
        ("let r = items | map:", Some(Kind::Map)),
        ("let r = items | pmap:", Some(Kind::Pmap)),
        ("let r = items | reduce(acc, x):", Some(Kind::Reduce)),
        ("let r = items | filter:", Some(Kind::Filter)),
        ("let r = session \"a\" -> session \"b\"", Some(Kind::Arrow)),
        ("let r = research(topic: t)", Some(Kind::Call)),
        ("session \"a | b\"", Some(Kind::Session)),
        ("resume: captain", Some(Kind::Resume)),
        ("output r = session \"x\"", Some(Kind::Output)),
        ("input topic: \"What?\"", Some(Kind::Input)),
        ("use \"x/y\" as y", Some(Kind::Use)),
        ("approve deploy:", Some(Kind::Approve)),
        ("# note", Some(Kind::Comment)),
        ("process(chunk)", Some(Kind::Call)),
    ];
    for (text, want) in cases {
        assert_eq!(classify(text), want, "{text}");
    }
}

/// docs/language.md shows the table as the code has it (`PROSE_STATE_BLESS=1` writes it).
#[test]
fn the_docs_show_the_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/language.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let start = "<!-- construct table: generated from src/language.rs (PROSE_STATE_BLESS=1 cargo test --lib language) -->\n";
    let end = "<!-- end of the construct table -->\n";
    let (head, rest) = doc
        .split_once(start)
        .expect("docs/language.md has the table's start");
    let (_, tail) = rest
        .split_once(end)
        .expect("docs/language.md has the table's end");
    let want = format!("{head}{start}{}{end}{tail}", docs_table());
    if std::env::var_os("PROSE_STATE_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    assert_eq!(
        doc, want,
        "docs/language.md's table differs from src/language.rs's"
    );
}

#[test]
fn frames_are_invocations_and_branches() {
    assert!(is_frame(Some(Kind::Invoke), Some("executing")));
    assert!(is_frame(Some(Kind::Branch), Some("started")));
    for k in [
        Kind::If,
        Kind::Loop,
        Kind::Try,
        Kind::Choice,
        Kind::Parallel,
    ] {
        assert!(!is_frame(Some(k), Some("started")));
    }
    assert!(is_frame(None, Some("executing")));
    assert!(!is_frame(None, Some("started")));
}

/// The gate an `approve` statement names, for the keyword in every one of its 128 cases and
/// every shape a record's text takes (colon or none, a comment, the property lines); and no
/// gate for a text whose first word only starts like the keyword, or a statement of another
/// form.
#[test]
fn an_approve_statement_names_its_gate_in_any_case() {
    use super::approved_gate;
    for mask in 0..128u32 {
        let word: String = "approve"
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if mask & (1 << i) != 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for text in [
            format!("{word} g:"),
            format!("  {word} g"),
            format!("{word}\tg: # why"),
            format!("{word} g: (prompt)\n  prompt: \"x: y\""),
        ] {
            assert_eq!(approved_gate(&text), Some("g"), "{text:?}");
        }
        for text in [
            format!("{word}d g:"),
            format!("{word}:"),
            format!("# {word} g:"),
            format!("let x = {word} g:"),
            format!("{word} :"),
        ] {
            assert_eq!(approved_gate(&text), None, "{text:?}");
        }
    }
}
