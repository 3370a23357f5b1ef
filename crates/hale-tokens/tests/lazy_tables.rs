//! Issue 13: a BPE table is loaded only by the first count in its family (its
//! own test binary, so no other test has loaded a table before).

use hale_core::models::TokenizerFamily;
use hale_tokens::Tokenizer;

#[test]
fn tables_load_only_on_first_use_in_their_family() {
    let t = Tokenizer::new();
    assert!(t.loaded().is_empty(), "nothing loaded by a new handle");
    t.count("claude-sonnet-4", "hello world");
    assert!(
        t.loaded().is_empty(),
        "an approximated model loads no table"
    );
    assert_eq!(t.count("gpt-4o", "hello world"), 2);
    assert_eq!(t.loaded(), vec![TokenizerFamily::O200k]);
    assert_eq!(t.count("gpt-4.1-mini", "hello world"), 2);
    assert_eq!(t.count("o3", "hello world"), 2);
    assert_eq!(
        t.loaded(),
        vec![TokenizerFamily::O200k],
        "one table for the family"
    );
    assert_eq!(t.count("gpt-4", "hello world"), 2);
    assert_eq!(
        t.loaded(),
        vec![TokenizerFamily::O200k, TokenizerFamily::Cl100k]
    );
}
