//! The settings reference of `docs/operations.md`, generated from the settings table.
//!
//! The docs page holds the table between two marker lines; a test regenerates it and fails
//! when the page differs, so the page cannot drift from the code. Run the test with
//! `DELAYQ_UPDATE_DOCS=1` to write the new table into the page.

use super::settings::reference;

/// The line before the generated table in `docs/operations.md`.
pub(crate) const BEGIN: &str =
    "<!-- settings table: generated from crates/delayq-daemon/src/config/settings.rs -->";
/// The line after it.
pub(crate) const END: &str = "<!-- end of settings table -->";

/// The settings as a Markdown table: flag, variable, file key, accepted values, default.
pub(crate) fn markdown_table() -> String {
    let mut out = String::from(
        "| flag | environment | file key | accepts | default | what it sets |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for meta in reference() {
        let n = &meta.names;
        let default = if meta.default.is_empty() {
            "—".to_owned()
        } else {
            format!("`{}`", meta.default)
        };
        let repeat = if meta.repeated { " (repeatable)" } else { "" };
        out.push_str(&format!(
            "| `--{} {}`{repeat} | `{}` | `{}` | {} | {default} | {} |\n",
            n.flag,
            meta.value_name.replace('|', "\\|"),
            n.env,
            n.key,
            meta.accepts.replace('|', "\\|"),
            meta.doc.replace('|', "\\|"),
        ));
    }
    out
}

/// Replaces the text between the markers of `page` with `table`; `None` if a marker is
/// missing.
fn with_table(page: &str, table: &str) -> Option<String> {
    let start = page.find(BEGIN)? + BEGIN.len();
    let end = start + page[start..].find(END)?;
    Some(format!("{}\n{table}{}", &page[..start], &page[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operations_page_lists_every_setting_as_declared() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let page = std::fs::read_to_string(path).expect("read docs/operations.md");
        let want = with_table(&page, &markdown_table()).expect("the page has both markers");
        if want == page {
            return;
        }
        if std::env::var_os("DELAYQ_UPDATE_DOCS").is_some() {
            std::fs::write(path, want).expect("write docs/operations.md");
            return;
        }
        panic!(
            "docs/operations.md does not list the settings as declared; run this test with \
             DELAYQ_UPDATE_DOCS=1 to regenerate it. The table should be:\n{}",
            markdown_table()
        );
    }

    #[test]
    fn the_example_file_of_the_operations_page_is_valid() {
        use crate::config::settings::Settings;
        use crate::config::sources::{ConfigFile, Sources};
        use crate::config::{ServeArgs, ServerConfig};

        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let page = std::fs::read_to_string(path).expect("read docs/operations.md");
        let after = &page[page.find(END).expect("the end marker")..];
        let start = after.find("```toml\n").expect("a TOML example") + "```toml\n".len();
        let example = &after[start..start + after[start..].find("```").expect("its end")];
        let file = ConfigFile::parse(example, std::path::Path::new("example.toml")).unwrap();
        let args = ServeArgs::default();
        let sources = Sources {
            args: &args,
            file: Some(&file),
        };
        let settings = Settings::read(&sources).unwrap();
        assert!(settings.origin.auth_tokens.is_given() && settings.origin.retention_ms.is_given());
        ServerConfig::from_settings(settings, &|_| None).unwrap();
    }

    #[test]
    fn the_table_goes_between_the_markers() {
        let page = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        assert_eq!(
            with_table(&page, "new\n"),
            Some(format!("a\n{BEGIN}\nnew\n{END}\nb\n"))
        );
        assert_eq!(with_table("no markers", "x"), None);
    }
}
