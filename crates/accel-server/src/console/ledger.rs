//! A host page's GPU partitions (issue 45): per partitioned GPU, a bar of its memory
//! slices with each holder over the slices it occupies (a MIG instance at its
//! placement, a whole-GPU or VFIO holder across all of them), the holders named with
//! their consumer, and the member providers with what Placement can still hand out
//! of each (`accel_store::estate::ledgers`, read in the host page's snapshot).
//!
//! The bar is a table row whose cells span their slices by `colspan`: the layout is
//! the markup's, so it needs no inline style (the CSP forbids one) and no script, and
//! a holder's slices are its cell's `data-start` and `data-size`.

use super::html::{esc, name, qv};
use accel_core::partition::Span;
use accel_store::estate::ledgers::{Form, HolderView, LedgerView, MemberView};
use std::fmt::Write;

/// Every ledger of the page, under one heading; nothing for a host without one.
pub(crate) fn ledgers(h: &mut String, ledgers: &[LedgerView]) {
    if ledgers.is_empty() {
        return;
    }
    h.push_str(
        "<h2>GPU partitions</h2><p class=\"muted\">Each partitioned GPU's ledger: which \
         memory slices each holder occupies, and what each way of taking the GPU can still \
         give (Placement's free room, which the ledger keeps equal to what it can still \
         create).</p>",
    );
    for l in ledgers {
        ledger(h, l);
    }
}

fn ledger(h: &mut String, l: &LedgerView) {
    let g = &l.geometry;
    let mig = if g.mig_enabled { "on" } else { "off" };
    let _ = write!(
        h,
        "<section class=\"ledger\" data-test=\"ledger\" data-gpu=\"{u}\" data-slices=\"{n}\" \
         data-mig=\"{mig}\" data-holders=\"{held}\"><h3><a href=\"/hosts/{u}\">{gpu}</a> \
         <span class=\"muted\">MIG {mig} · {n} memory slices · {held} {holders}</span></h3>",
        u = esc(&l.gpu_uuid),
        n = g.memory_slices,
        held = l.holders.len(),
        holders = if l.holders.len() == 1 {
            "holder"
        } else {
            "holders"
        },
        gpu = name(&l.gpu_name),
    );
    slice_bar(h, l);
    h.push_str("<div class=\"ledger-tables\">");
    holders(h, l);
    members(h, &l.members);
    h.push_str("</div></section>");
}

/// What occupies a run of slices: holders sharing it (a time-sliced vGPU type's
/// several instances share every slice), or a MIG instance nobody holds.
struct Cell<'a> {
    span: Span,
    holders: Vec<&'a HolderView>,
    /// A standing instance's profile, when no holder has it.
    standing: Option<&'a str>,
}

/// The cells of the bar in slice order. Holders never overlap (the ledger's
/// invariant); if stored rows ever did, the later cell is folded into the earlier one
/// so that every holder is still shown.
fn cells<'a>(l: &'a LedgerView) -> Vec<Cell<'a>> {
    let n = l.geometry.memory_slices;
    let mut cells: Vec<Cell> = Vec::new();
    for holder in &l.holders {
        let span = holder.form.span(n);
        match cells.iter_mut().find(|c| c.span == span) {
            Some(c) => c.holders.push(holder),
            None => cells.push(Cell {
                span,
                holders: vec![holder],
                standing: None,
            }),
        }
    }
    for (profile, at) in &l.unheld {
        cells.push(Cell {
            span: *at,
            holders: Vec::new(),
            standing: Some(profile),
        });
    }
    cells.sort_by_key(|c| (c.span.start, std::cmp::Reverse(c.span.size)));
    let mut merged: Vec<Cell> = Vec::with_capacity(cells.len());
    for c in cells {
        match merged.last_mut() {
            Some(last) if c.span.start < last.span.start + last.span.size => {
                let end = (last.span.start + last.span.size).max(c.span.start + c.span.size);
                last.span.size = end - last.span.start;
                last.holders.extend(c.holders);
                last.standing = last.standing.or(c.standing);
            }
            _ => merged.push(c),
        }
    }
    merged
}

fn slice_bar(h: &mut String, l: &LedgerView) {
    let n = l.geometry.memory_slices;
    h.push_str("<table class=\"slices\" data-test=\"slice-bar\"><thead><tr>");
    for i in 0..n {
        let _ = write!(h, "<th>{i}</th>");
    }
    h.push_str("</tr></thead><tbody><tr>");
    let mut at = 0;
    for c in cells(l) {
        if c.span.start >= n {
            break;
        }
        for free in at..c.span.start {
            free_cell(h, free);
        }
        let size = c.span.size.min(n - c.span.start).max(1);
        let kind = c
            .holders
            .first()
            .map_or("standing", |holder| holder.form.kind());
        let _ = write!(
            h,
            "<td colspan=\"{size}\" class=\"{kind}\" data-test=\"slice-cell\" data-start=\"{s}\" \
             data-size=\"{size}\">",
            s = c.span.start,
        );
        for holder in &c.holders {
            let (start, size) = {
                let s = holder.form.span(n);
                (s.start, s.size)
            };
            let _ = write!(
                h,
                "<a href=\"/consumers?q={q}\" title=\"{u}\" data-test=\"slice-holder\" \
                 data-consumer=\"{u}\" data-form=\"{kind}\" data-start=\"{start}\" \
                 data-size=\"{size}\"><code>{short}</code><span>{what}</span></a>",
                q = esc(&qv(&holder.consumer)),
                u = esc(&holder.consumer),
                kind = holder.form.kind(),
                short = esc(&short(&holder.consumer)),
                what = name(&form_name(&holder.form)),
            );
        }
        if let Some(profile) = c.standing {
            let _ = write!(
                h,
                "<span data-test=\"slice-standing\" data-profile=\"{p}\" data-start=\"{s}\" \
                 data-size=\"{size}\" title=\"a MIG instance on the GPU that no claim holds\">\
                 {pn}<span>nobody's</span></span>",
                p = esc(profile),
                pn = name(profile),
                s = c.span.start,
            );
        }
        h.push_str("</td>");
        at = c.span.start + size;
    }
    for free in at..n {
        free_cell(h, free);
    }
    h.push_str("</tr></tbody></table>");
}

fn free_cell(h: &mut String, slice: u32) {
    let _ = write!(
        h,
        "<td class=\"free\" data-test=\"slice-free\" data-slice=\"{slice}\">free</td>"
    );
}

/// A consumer uuid's first group: enough to tell holders apart in a one-slice cell
/// (the full uuid is its title, and the holders' table's).
fn short(consumer: &str) -> String {
    consumer
        .split('-')
        .next()
        .unwrap_or(consumer)
        .chars()
        .take(8)
        .collect()
}

/// How a holder takes the GPU, in words.
fn form_name(f: &Form) -> String {
    match f {
        Form::Whole => "whole GPU".to_owned(),
        Form::Vfio => "whole GPU (VFIO)".to_owned(),
        Form::Mig { profile, .. } => profile.clone(),
        Form::Vgpu { name, .. } => format!("vGPU {name}"),
    }
}

fn slices(s: Span) -> String {
    if s.size == 1 {
        format!("{}", s.start)
    } else {
        format!("{}–{}", s.start, s.start + s.size - 1)
    }
}

/// The holders by slice (a whole-GPU holder first), then by consumer.
fn holders(h: &mut String, l: &LedgerView) {
    if l.holders.is_empty() {
        h.push_str("<p class=\"muted\" data-test=\"ledger-empty\">Nobody holds any of it.</p>");
        return;
    }
    let n = l.geometry.memory_slices;
    let mut rows: Vec<(Span, &HolderView)> =
        l.holders.iter().map(|x| (x.form.span(n), x)).collect();
    rows.sort_by(|a, b| (a.0, &a.1.consumer).cmp(&(b.0, &b.1.consumer)));
    h.push_str(
        "<table class=\"holders\"><thead><tr><th>Holder</th><th>Consumer type</th><th>Takes</th>\
         <th>Slices</th></tr></thead><tbody>",
    );
    for (span, holder) in rows {
        let _ = write!(
            h,
            "<tr data-test=\"ledger-holder\" data-consumer=\"{u}\" data-type=\"{t}\" \
             data-form=\"{kind}\" data-start=\"{s}\" data-size=\"{size}\" data-provider=\"{rp}\">\
             <td><a href=\"/consumers?q={q}\"><code>{u}</code></a></td><td>{t}</td><td>{what}</td>\
             <td>{sl}</td></tr>",
            u = esc(&holder.consumer),
            q = esc(&qv(&holder.consumer)),
            t = esc(holder.consumer_type.as_deref().unwrap_or("")),
            kind = holder.form.kind(),
            s = span.start,
            size = span.size,
            rp = esc(&holder.rp_uuid),
            what = esc(&form_name(&holder.form)),
            sl = slices(span),
        );
    }
    h.push_str("</tbody></table>");
}

/// Each way of taking the GPU, named by what it takes (its provider's name is the
/// row's title: the tree above lists the providers).
fn members(h: &mut String, members: &[MemberView]) {
    h.push_str(
        "<table class=\"members\"><thead><tr><th>Takes</th><th>Class</th>\
         <th class=\"num\">Total</th><th class=\"num\">Reserved</th><th class=\"num\">Used</th>\
         <th class=\"num\">Free</th></tr></thead><tbody>",
    );
    for m in members {
        let class = m.resource_class.as_deref().unwrap_or("");
        let _ = write!(
            h,
            "<tr data-test=\"ledger-member\" data-provider=\"{u}\" data-member=\"{key}\" \
             data-label=\"{label}\" data-rc=\"{rc}\" data-held=\"{held}\" title=\"{p}\"",
            u = esc(&m.rp_uuid),
            rc = esc(class),
            key = esc(&m.member.key()),
            label = esc(&m.label),
            held = m.held,
            p = esc(&m.provider_name),
        );
        match m.inventory {
            Some(i) => {
                let _ = write!(
                    h,
                    " data-total=\"{t}\" data-reserved=\"{r}\" data-used=\"{u}\" data-free=\"{f}\"\
                     {cls}><td>{label}</td><td>{c}</td><td class=\"num\">{t}</td>\
                     <td class=\"num\">{r}</td><td class=\"num\">{u}</td><td class=\"num\">{f}</td></tr>",
                    t = i.total,
                    r = i.reserved,
                    u = i.used,
                    f = i.free,
                    cls = if i.free == 0 { " class=\"none-free\"" } else { "" },
                    label = name(&m.label),
                    c = name(class),
                );
            }
            None => {
                let _ = write!(
                    h,
                    "><td>{label}</td><td>{c}</td>\
                     <td class=\"num muted\" colspan=\"4\">no inventory</td></tr>",
                    label = name(&m.label),
                    c = name(class),
                );
            }
        }
    }
    h.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::partition::fixtures;

    fn holder(consumer: &str, form: Form) -> HolderView {
        HolderView {
            consumer: consumer.into(),
            consumer_type: Some("INSTANCE".into()),
            rp_uuid: "rp".into(),
            form,
        }
    }

    fn mig(start: u32, size: u32) -> Form {
        Form::Mig {
            profile: "1g.10gb".into(),
            at: Span { start, size },
        }
    }

    fn view(holders: Vec<HolderView>, unheld: Vec<(String, Span)>) -> LedgerView {
        LedgerView {
            gpu_uuid: "gpu".into(),
            gpu_name: "n_0000:3b:00.0".into(),
            geometry: fixtures::h100_80gb(),
            holders,
            unheld,
            members: Vec::new(),
        }
    }

    /// `(data-start, data-size)` of each `data-test` element, in page order.
    fn spans(html: &str, hook: &str) -> Vec<(u32, u32)> {
        let needle = format!("data-test=\"{hook}\"");
        html.match_indices(&needle)
            .map(|(i, _)| {
                let tag = &html[i..i + html[i..].find('>').unwrap()];
                let get = |a: &str| {
                    let k = format!("{a}=\"");
                    let s = tag.find(&k).unwrap() + k.len();
                    tag[s..s + tag[s..].find('"').unwrap()].parse().unwrap()
                };
                (get("data-start"), get("data-size"))
            })
            .collect()
    }

    #[test]
    fn cells_cover_every_slice_once_in_order() {
        // Two instances out of order, one standing nobody holds, gaps between.
        let l = view(
            vec![holder("b-1", mig(6, 1)), holder("a-1", mig(0, 2))],
            vec![("3g.40gb".into(), Span { start: 4, size: 2 })],
        );
        let mut h = String::new();
        slice_bar(&mut h, &l);
        assert_eq!(spans(&h, "slice-cell"), [(0, 2), (4, 2), (6, 1)]);
        assert_eq!(spans(&h, "slice-holder"), [(0, 2), (6, 1)]);
        assert_eq!(spans(&h, "slice-standing"), [(4, 2)]);
        assert_eq!(h.matches("data-test=\"slice-free\"").count(), 3, "{h}");
        let colspans: u32 = h
            .match_indices("colspan=\"")
            .map(|(i, _)| {
                let s = i + 9;
                h[s..s + h[s..].find('"').unwrap()].parse::<u32>().unwrap()
            })
            .sum();
        assert_eq!(colspans + 3, l.geometry.memory_slices);
    }

    #[test]
    fn a_whole_holder_spans_the_gpu_and_overlaps_never_hide_a_holder() {
        let l = view(vec![holder("w-1", Form::Vfio)], Vec::new());
        let mut h = String::new();
        slice_bar(&mut h, &l);
        assert_eq!(spans(&h, "slice-cell"), [(0, 8)]);
        assert!(!h.contains("slice-free"));

        let l = view(
            vec![holder("a-1", mig(0, 4)), holder("b-1", mig(2, 4))],
            Vec::new(),
        );
        let mut h = String::new();
        slice_bar(&mut h, &l);
        assert_eq!(spans(&h, "slice-cell"), [(0, 6)]);
        assert_eq!(spans(&h, "slice-holder"), [(0, 4), (2, 4)]);
    }

    #[test]
    fn names_are_escaped() {
        let l = view(
            vec![holder(
                "<x>\"",
                Form::Vgpu {
                    type_id: "t".into(),
                    name: "<b>GRID</b>".into(),
                    at: None,
                },
            )],
            Vec::new(),
        );
        let mut h = String::new();
        ledger(&mut h, &l);
        assert!(!h.contains("<x>") && !h.contains("<b>GRID"), "{h}");
        assert!(h.contains("&lt;b&gt;GRID&lt;/b&gt;"), "{h}");
    }
}
