//! The web configuration's own checks: `basic_auth_users` hashes and their cost.

use super::file::load;
use crate::config::tests::{TempFile, no_env};
use crate::config::*;

/// A bcrypt hash of `cost` (made at cost 4 and relabelled: only its form is read at loading).
fn hash_of_cost(cost: u32) -> String {
    let made = bcrypt::hash("s3cret", 4).expect("hash");
    format!("$2b${cost:02}${}", &made[7..])
}

/// The web file holding `alice` with a hash of `cost`.
fn with_cost(cost: u32) -> (TempFile, Result<WebConfig, Vec<ConfigIssue>>) {
    let file = TempFile::new(&format!(
        "basic_auth_users:\n  bob: '{}'\n  alice: '{}'\n",
        hash_of_cost(10),
        hash_of_cost(cost)
    ));
    let loaded = load(&file.0, &no_env());
    (file, loaded)
}

#[test]
fn a_bcrypt_cost_over_the_bound_is_refused_where_it_is_written() {
    let (file, loaded) = with_cost(31);
    let issues = loaded.expect_err("cost 31 is refused");
    assert_eq!(issues.len(), 1, "{issues:#?}");
    let issue = &issues[0];
    assert_eq!(issue.file.as_deref(), Some(file.0.as_path()), "{issue}");
    assert_eq!((issue.line, issue.column), (Some(3), Some(10)), "{issue}");
    assert_eq!(issue.field, "basic_auth_users.alice", "{issue}");
    for words in ["bcrypt cost 31 is over 14", "htpasswd -nBC 12 alice"] {
        assert!(issue.message.contains(words), "{words:?} in {issue}");
    }
}

#[test]
fn bcrypt_cost_14_is_accepted_and_15_refused() {
    let (_file, loaded) = with_cost(MAX_BCRYPT_COST);
    let web = loaded.expect("cost 14 is accepted");
    let users: Vec<&str> = web.users.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(users, ["bob", "alice"]);
    let (_file, loaded) = with_cost(MAX_BCRYPT_COST + 1);
    let issues = loaded.expect_err("cost 15 is refused");
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert!(
        issues[0].message.contains("bcrypt cost 15 is over 14"),
        "{}",
        issues[0]
    );
}
