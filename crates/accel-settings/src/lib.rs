//! Settings declared once.
//!
//! Each section of accel's configuration (`accel serve`, `accel agent`, ...) is one
//! [`settings!`] declaration: a key's doc comment, type, default and flag attributes
//! are written once, and the macro derives from them
//! - the flags (a `clap::Args` struct: `--flag`, its environment variable and its help,
//!   which ends with the default the declaration states, so the help cannot drift);
//! - the file (a `serde` struct of the TOML file's keys, unknown keys refused);
//! - the resolved settings (flag, then environment, then file, then default);
//! - [`Key`]s, the table the documents' flag tables and `--help` are tested against.
//!
//! A key's kind says how its layers combine:
//!
//! | kind | resolved type | flag | merge |
//! |---|---|---|---|
//! | `value(DEFAULT)` | `T` | `--key VALUE` | flag, env, file, else `DEFAULT` |
//! | `optional("what none means")` | `Option<T>` | `--key VALUE` | flag, env, file, else none |
//! | `switch(DEFAULT)` | `bool` | `--key` turns it on | on if the flag is given, else file, else `DEFAULT` |
//! | `negated(DEFAULT)` | `bool` | `--no-key` turns it off | off if the flag is given, else file, else `DEFAULT` |
//!
//! A key without `flag(...)` is a file key only. Tables (`[nova]`, `[kubernetes]`) are
//! `optional` keys of their own typed structs.
//!
//! Why a macro and not figment or a serde round trip: the help text and the docs
//! need each key's default as people read it, and `clap` must see `Option<T>` written
//! out to leave an absent flag absent; one `macro_rules!` gives both with no runtime
//! layer and no second spelling of any key. (figment would still need the clap struct
//! and a resolved struct beside its providers.)

mod secret;
pub use secret::Secret;

// The macros name these through `$crate`, so a declaring crate needs only `clap` (the
// derive's own paths) and `serde`.
#[doc(hidden)]
pub use clap as __clap;

use std::path::PathBuf;

/// One key as its declaration states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The file key (and the resolved field's name).
    pub name: &'static str,
    /// `--flag`, when the key has one (`--no-console` for a negated key).
    pub flag: Option<String>,
    /// The environment variable the flag also reads.
    pub env: Option<String>,
    /// What the flag's value looks like (`HOST:PORT`), for flags that take one.
    pub value_name: Option<String>,
    /// The doc comment, lines joined.
    pub help: String,
    /// The default as people read it; `None` when there is none.
    pub default: Option<String>,
}

impl Key {
    /// `name`'s flag, environment variable and value name, read from the clap
    /// command its flags struct builds.
    #[doc(hidden)]
    pub fn describe(
        cmd: &clap::Command,
        name: &'static str,
        docs: &[&str],
        default: Option<String>,
    ) -> Key {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id().as_str() == name && a.get_long().is_some());
        Key {
            name,
            flag: arg.and_then(|a| a.get_long()).map(|l| format!("--{l}")),
            env: arg
                .and_then(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned()),
            value_name: arg
                .filter(|a| a.get_action().takes_values())
                .and_then(|a| a.get_value_names())
                .and_then(|v| v.first())
                .map(|v| v.to_string()),
            help: join_doc(docs),
            default,
        }
    }
}

/// A flag's help: its doc comment, then the default it has.
#[doc(hidden)]
pub fn help(docs: &[&str], default: Option<String>) -> String {
    let mut text = join_doc(docs);
    if let Some(d) = default {
        text.push_str(&format!(" [default: {d}]"));
    }
    text
}

fn join_doc(docs: &[&str]) -> String {
    let mut out = String::new();
    for line in docs.iter().map(|l| l.trim()) {
        if line.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
    }
    out
}

/// How a default reads in `--help` and the docs.
pub trait ShowDefault {
    /// `None` for a value that reads as "none" (an empty list).
    fn show_default(&self) -> Option<String>;
}

macro_rules! show_by_display {
    ($($t:ty),*) => {$(
        impl ShowDefault for $t {
            fn show_default(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
show_by_display!(String, &str, bool, u16, u32, u64, usize, i32, i64, f64);

impl ShowDefault for PathBuf {
    fn show_default(&self) -> Option<String> {
        Some(self.display().to_string())
    }
}

impl<T: ShowDefault> ShowDefault for Vec<T> {
    fn show_default(&self) -> Option<String> {
        let items: Vec<String> = self.iter().filter_map(T::show_default).collect();
        (!items.is_empty()).then(|| items.join(","))
    }
}

/// Declares a section of settings; see the crate's docs.
///
/// ```
/// accel_settings::settings! {
///     /// A demo section.
///     pub struct Demo / DemoFlags / DemoFile {
///         /// Where to listen.
///         listen: String = value("127.0.0.1:1".into()), flag(long, env = "DEMO_LISTEN");
///         /// A database URL.
///         database: String = optional("in memory"), flag(long);
///         /// Verbose logs.
///         verbose: bool = switch(false), flag(long);
///         /// Serve the console.
///         console: bool = negated(true), flag(long = "no-console");
///         /// Retries, from the file only.
///         retries: u32 = value(10);
///     }
/// }
/// let d = Demo::resolve(DemoFlags::default(), toml::from_str("retries = 3").unwrap());
/// assert_eq!((d.listen.as_str(), d.database, d.verbose, d.console, d.retries),
///            ("127.0.0.1:1", None, false, true, 3));
/// ```
#[macro_export]
macro_rules! settings {
    (
        $(#[$smeta:meta])*
        $vis:vis struct $name:ident / $flags:ident / $file:ident {
            $(
                $(#[doc = $doc:literal])*
                $key:ident : $ty:ty = $kind:ident ( $($default:tt)* ) $( , flag ( $($arg:tt)* ) )? ;
            )*
        }
    ) => {
        $crate::__settings_munch! {
            [flags file]
            [ [$(#[$smeta])*] [$vis] [$name] [$flags] [$file] ]
            [] [] [] []
            [ $( { $key [$ty] $kind [$($default)*] [$($doc)*] [ $( $($arg)* )? ] } )* ]
        }

        impl $name {
            /// Every key of the section, as declared.
            pub fn keys() -> ::std::vec::Vec<$crate::Key> {
                let cmd = <$flags as $crate::__clap::Args>::augment_args(
                    $crate::__clap::Command::new("settings"),
                );
                ::std::vec![ $(
                    $crate::Key::describe(
                        &cmd,
                        stringify!($key),
                        &[$($doc),*],
                        $crate::__settings_default!($kind [$($default)*] $ty),
                    ),
                )* ]
            }
        }
    };
}

/// Builds the three structs a key at a time (a derive must see `Option<T>` written
/// out, so the types cannot come from a macro call in type position).
#[doc(hidden)]
#[macro_export]
macro_rules! __settings_munch {
    // value(DEFAULT): flag Option<T>, resolved T.
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] value [$($d:tt)*] [$($doc:literal)*] [$($arg:tt)+] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)* #[arg($($arg)+, help = $crate::help(&[$($doc),*], $crate::__settings_default!(value [$($d)*] $ty)))] pub $key: Option<$ty>,]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: $ty,]
            [$($in)* $key: $crate::__settings_merge!(value [$($d)*] $fv.$key, $fiv.$key),]
            [$($rest)*] }
    };
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] value [$($d:tt)*] [$($doc:literal)*] [] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)*]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: $ty,]
            [$($in)* $key: $crate::__settings_merge!(value [$($d)*] None, $fiv.$key),]
            [$($rest)*] }
    };
    // optional(...): flag Option<T>, resolved Option<T>.
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] optional [$($d:tt)*] [$($doc:literal)*] [$($arg:tt)+] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)* #[arg($($arg)+, help = $crate::help(&[$($doc),*], $crate::__settings_default!(optional [$($d)*] $ty)))] pub $key: Option<$ty>,]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($in)* $key: $crate::__settings_merge!(optional [$($d)*] $fv.$key, $fiv.$key),]
            [$($rest)*] }
    };
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] optional [$($d:tt)*] [$($doc:literal)*] [] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)*]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($in)* $key: $crate::__settings_merge!(optional [$($d)*] None, $fiv.$key),]
            [$($rest)*] }
    };
    // switch(DEFAULT) and negated(DEFAULT): a bare flag, resolved bool.
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] $kind:ident [$($d:tt)*] [$($doc:literal)*] [$($arg:tt)+] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)* #[arg($($arg)+, help = $crate::help(&[$($doc),*], $crate::__settings_default!($kind [$($d)*] $ty)))] pub $key: $ty,]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: $ty,]
            [$($in)* $key: $crate::__settings_merge!($kind [$($d)*] $fv.$key, $fiv.$key),]
            [$($rest)*] }
    };
    ([$fv:ident $fiv:ident] $head:tt [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*]
     [ { $key:ident [$ty:ty] $kind:ident [$($d:tt)*] [$($doc:literal)*] [] } $($rest:tt)* ]) => {
        $crate::__settings_munch! { [$fv $fiv] $head
            [$($fl)*]
            [$($fi)* $(#[doc = $doc])* pub $key: Option<$ty>,]
            [$($re)* $(#[doc = $doc])* pub $key: $ty,]
            [$($in)* $key: $crate::__settings_merge!($kind [$($d)*] false, $fiv.$key),]
            [$($rest)*] }
    };
    // Every key done: the three structs.
    ([$fv:ident $fiv:ident] [ [$($smeta:tt)*] [$vis:vis] [$name:ident] [$flags:ident] [$file:ident] ]
     [$($fl:tt)*] [$($fi:tt)*] [$($re:tt)*] [$($in:tt)*] []) => {
        $($smeta)*
        #[derive(Debug, Clone)]
        $vis struct $name { $($re)* }

        /// The section's flags and environment variables (absent ones stay `None`).
        #[derive(Debug, Clone, Default, clap::Args)]
        $vis struct $flags { $($fl)* }

        /// The section's keys in the configuration file; unknown keys are refused.
        #[derive(Debug, Clone, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $file { $($fi)* }

        impl $name {
            /// Flag (or its environment variable) over file over default, key by key.
            pub fn resolve($fv: $flags, $fiv: $file) -> $name {
                let _ = &$fv;
                $name { $($in)* }
            }
        }
    };
}

/// One key's layers combined, by kind.
#[doc(hidden)]
#[macro_export]
macro_rules! __settings_merge {
    (value [$($d:tt)*] $flag:expr, $file:expr) => {
        $flag.or($file).unwrap_or_else(|| $($d)*)
    };
    (optional [$($d:tt)*] $flag:expr, $file:expr) => {
        $flag.or($file)
    };
    (switch [$($d:tt)*] $flag:expr, $file:expr) => {
        $flag || $file.unwrap_or($($d)*)
    };
    (negated [$($d:tt)*] $flag:expr, $file:expr) => {
        !$flag && $file.unwrap_or($($d)*)
    };
}

/// One key's default as people read it, by kind.
#[doc(hidden)]
#[macro_export]
macro_rules! __settings_default {
    (value [$($d:tt)*] $ty:ty) => {
        $crate::ShowDefault::show_default(&{
            let v: $ty = $($d)*;
            v
        })
    };
    (optional [] $ty:ty) => {
        None
    };
    (optional [$what:literal] $ty:ty) => {
        Some(String::from($what))
    };
    (switch [$($d:tt)*] $ty:ty) => {
        $crate::ShowDefault::show_default(&$($d)*)
    };
    (negated [$($d:tt)*] $ty:ty) => {
        $crate::ShowDefault::show_default(&$($d)*)
    };
}

/// The documents' table of a section's keys: flag, environment variable, file key,
/// default and what the key does, one row a key, in declaration order.
pub fn markdown_table(keys: &[Key]) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from(
        "| flag | environment | config key | default | what |\n|---|---|---|---|---|\n",
    );
    for k in keys {
        let flag = match (&k.flag, &k.value_name) {
            (Some(f), Some(v)) => format!("`{f} {}`", cell(v)),
            (Some(f), None) => format!("`{f}`"),
            (None, _) => "—".into(),
        };
        let env = k.env.as_ref().map_or("—".into(), |e| format!("`{e}`"));
        let default = k.default.as_ref().map_or("none".into(), |d| cell(d));
        out.push_str(&format!(
            "| {flag} | {env} | `{}` | {default} | {} |\n",
            k.name,
            cell(&k.help)
        ));
    }
    out
}

/// Holds the table between `<!-- settings:NAME -->` and `<!-- /settings:NAME -->` in
/// the document at `path` to `table`: `Err` with both when they differ. With
/// `ACCEL_UPDATE_DOCS=1` in the environment it rewrites the document instead.
pub fn check_doc_table(path: &std::path::Path, name: &str, table: &str) -> Result<(), String> {
    let doc = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (open, close) = (
        format!("<!-- settings:{name} -->\n"),
        format!("<!-- /settings:{name} -->"),
    );
    let start = doc
        .find(&open)
        .ok_or_else(|| format!("{} has no {open:?} marker", path.display()))?
        + open.len();
    let end = doc[start..]
        .find(&close)
        .ok_or_else(|| format!("{} has no {close:?} marker", path.display()))?
        + start;
    if &doc[start..end] == table {
        return Ok(());
    }
    if std::env::var_os("ACCEL_UPDATE_DOCS").is_some_and(|v| v == "1") {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        return std::fs::write(path, updated).map_err(|e| format!("{}: {e}", path.display()));
    }
    Err(format!(
        "the {name} table in {} differs from the declaration (rerun with ACCEL_UPDATE_DOCS=1 \
         to rewrite it):\n--- in the document\n{}\n--- declared\n{table}",
        path.display(),
        &doc[start..end]
    ))
}
