//! Inside each crate, no two sibling modules import each other, directly or around a circle.
//!
//! Between crates the compiler keeps the layers (a crate cannot name one that depends on it);
//! inside a crate it does not, so this test does. It parses every shipped source file with `syn`
//! (the whole file: an item under `#[cfg(test)]`, a `mod tests` or a file only declared for
//! tests is left out by its attribute, never by where a text search stops), starting from each
//! crate's `lib.rs` and following its `mod` declarations. Every path that starts at `crate`,
//! `super` or `self` is resolved to the module it names; an import of `a::b::x` from `a::c` is an
//! edge `b → c`'s sibling pair under `a`, and the siblings of every module must form no circle.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path inside its crate (`["compare", "sweep"]`); the crate root is `[]`.
type ModPath = Vec<String>;

/// Whether an item's attributes put it under `cfg(test)` (alone or inside `all(…)`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.require_list().map(|l| l.tokens.to_string()).unwrap_or_default();
            text == "test" || text.starts_with("all (test") || text.starts_with("all(test")
        }
    })
}

/// One crate's modules: each module's path, and the paths its shipped code names.
struct Crate {
    modules: BTreeSet<ModPath>,
    /// (the module that names it, the `crate`/`super`/`self` path resolved to crate-absolute segments)
    uses: Vec<(ModPath, Vec<String>)>,
}

/// Collects the absolute paths a module's shipped items name, descending into inline modules.
struct Paths<'a> {
    module: ModPath,
    out: &'a mut Vec<(ModPath, Vec<String>)>,
    inline: &'a mut Vec<(ModPath, syn::ItemMod)>,
}

impl Paths<'_> {
    fn resolve(&mut self, segments: Vec<String>) {
        let mut at = self.module.clone();
        let mut rest = segments.as_slice();
        match rest.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    at.pop();
                    rest = &rest[1..];
                }
            }
            _ => return,
        }
        at.extend(rest.iter().cloned());
        self.out.push((self.module.clone(), at));
    }

    fn use_tree(&mut self, prefix: Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut next = prefix;
                next.push(p.ident.to_string());
                self.use_tree(next, &p.tree);
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix;
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.resolve(full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix;
                full.push(r.ident.to_string());
                self.resolve(full);
            }
            syn::UseTree::Glob(_) => self.resolve(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix.clone(), t)),
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Type(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        match item {
            // An inline module is a module of its own: its paths are resolved from it.
            syn::Item::Mod(m) => self.inline.push((self.module.clone(), m.clone())),
            syn::Item::Use(u) => self.use_tree(Vec::new(), &u.tree),
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if matches!(segments.first().map(String::as_str), Some("crate" | "super" | "self")) {
            self.resolve(segments);
        }
        syn::visit::visit_path(self, path);
    }
}

/// The file of `mod name;` declared in `file` (which is module `parent_is_dir_owner` or not).
fn module_file(file: &Path, name: &str, attrs: &[syn::Attribute]) -> PathBuf {
    if let Some(p) = attrs.iter().find(|a| a.path().is_ident("path")) {
        if let syn::Meta::NameValue(nv) = &p.meta {
            if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value {
                return file.parent().unwrap().join(s.value());
            }
        }
    }
    let stem = file.file_stem().unwrap().to_string_lossy();
    let dir = if ["lib", "mod", "main"].contains(&stem.as_ref()) {
        file.parent().unwrap().to_path_buf()
    } else {
        file.parent().unwrap().join(stem.as_ref())
    };
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

fn read_module(file: &Path, module: ModPath, items: Vec<syn::Item>, krate: &mut Crate) {
    krate.modules.insert(module.clone());
    let mut inline = Vec::new();
    let mut paths = Paths { module: module.clone(), out: &mut krate.uses, inline: &mut inline };
    for item in &items {
        paths.visit_item(item);
    }
    for (parent, m) in inline {
        let mut child = parent;
        child.push(m.ident.to_string());
        match m.content {
            Some((_, items)) => {
                // An inline module's `mod x;` files live under the parent's directory.
                read_module(file, child, items, krate);
            }
            None => {
                let path = module_file(file, &m.ident.to_string(), &m.attrs);
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                read_module(&path, child, parsed.items, krate);
            }
        }
    }
}

fn read_crate(lib: &Path) -> Crate {
    let text = std::fs::read_to_string(lib).expect("lib.rs");
    let parsed = syn::parse_file(&text).expect("lib.rs parses");
    let mut krate = Crate { modules: BTreeSet::new(), uses: Vec::new() };
    read_module(lib, Vec::new(), parsed.items, &mut krate);
    krate
}

/// The sibling edges: for each use, the two children of the deepest common module that the
/// user and the used module descend through, when they differ.
fn sibling_edges(krate: &Crate) -> BTreeMap<ModPath, BTreeSet<(String, String)>> {
    let mut edges: BTreeMap<ModPath, BTreeSet<(String, String)>> = BTreeMap::new();
    for (from, path) in &krate.uses {
        // The module the path names: its longest prefix that is a module.
        let to: ModPath =
            (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| krate.modules.contains(p)).unwrap_or_default();
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if let (Some(a), Some(b)) = (from.get(common), to.get(common)) {
            edges.entry(from[..common].to_vec()).or_default().insert((a.clone(), b.clone()));
        }
    }
    edges
}

/// A circle among `edges`, if any, as the names around it.
fn circle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    // Depth-first search with colours: 0 unseen, 1 on the stack, 2 done.
    fn visit<'a>(
        n: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        colour: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        colour.insert(n, 1);
        stack.push(n);
        for &m in next.get(n).map(Vec::as_slice).unwrap_or_default() {
            match colour.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| *s == m).unwrap_or(0);
                    let mut c: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
                    c.push(m.to_string());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, next, colour, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        colour.insert(n, 2);
        None
    }
    let mut colour = BTreeMap::new();
    let nodes: Vec<&str> = next.keys().copied().collect();
    for n in nodes {
        if colour.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &next, &mut colour, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn crate_roots() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![("commgate".to_string(), root.join("src/lib.rs"))];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let dir = entry.expect("an entry").path();
        if dir.join("src/lib.rs").exists() {
            out.push((format!("commgate-{}", dir.file_name().unwrap().to_string_lossy()), dir.join("src/lib.rs")));
        }
    }
    out.sort();
    out
}

#[test]
fn no_module_imports_a_sibling_in_a_circle() {
    let mut wrong = Vec::new();
    for (name, lib) in crate_roots() {
        let krate = read_crate(&lib);
        for (parent, edges) in sibling_edges(&krate) {
            if let Some(c) = circle(&edges) {
                let under = if parent.is_empty() { "the crate root".to_string() } else { parent.join("::") };
                wrong.push(format!("{name}, under {under}: {}", c.join(" → ")));
                // What makes each edge of the circle: the paths named, as `from: path`.
                for pair in c.windows(2) {
                    let mut seen = BTreeSet::new();
                    for (from, path) in &krate.uses {
                        let (mut f, mut p) = (parent.clone(), parent.clone());
                        f.push(pair[0].clone());
                        p.push(pair[1].clone());
                        if from.starts_with(&f) && path.starts_with(&p) && seen.len() < 4 {
                            seen.insert(format!("    {}: crate::{}", from.join("::"), path.join("::")));
                        }
                    }
                    wrong.extend(seen);
                }
            }
        }
    }
    assert!(wrong.is_empty(), "modules importing each other in a circle:\n{}", wrong.join("\n"));
}

/// The check sees what a text search would miss: an import after a `#[cfg(test)]` text, in an
/// inline module, through `super::`, in a group; and it ignores imports in test-only items.
#[test]
fn the_check_finds_a_circle_anywhere_in_shipped_code_and_none_in_tests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "// #[cfg(test)] in a comment\n#[cfg(test)]\nmod tests { use crate::c::Z; }\nfn f() { super::b::g(); }\n",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "mod inner { use crate::{c::{self, Y}}; }\npub fn g() {}\n").unwrap();
    std::fs::write(src.join("c.rs"), "pub struct Y;\npub struct Z;\n#[cfg(test)]\nfn t() { crate::a::f(); }\n")
        .unwrap();
    let krate = read_crate(&src.join("lib.rs"));
    let edges = sibling_edges(&krate);
    let root = edges.get(&Vec::new()).expect("edges under the root");
    assert!(root.contains(&("a".into(), "b".into())) && root.contains(&("b".into(), "c".into())), "{root:?}");
    assert!(!root.contains(&("a".into(), "c".into())) && !root.contains(&("c".into(), "a".into())), "{root:?}");
    assert_eq!(circle(root), None);
    std::fs::write(src.join("c.rs"), "pub struct Y;\npub struct Z;\nfn t() { crate::a::f(); }\n").unwrap();
    let krate = read_crate(&src.join("lib.rs"));
    let c = circle(&sibling_edges(&krate)[&Vec::<String>::new()]).expect("a → b → c → a");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4, "{c:?}");
}
