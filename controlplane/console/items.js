// What the resource pages do with one item: delete it, and edit it, both
// under the API's optimistic concurrency (the ETag the item was read with
// goes back as If-Match, so an edit made meanwhile is a 412, shown as
// "changed by someone else", never overwritten).
import * as api from './api.js';
import { act, button, deleteButton, form, section } from './dom.js';

/** A Delete button for the item at path (what: "route chat"). */
export function deleteItem(what, path, ctx) {
  return deleteButton(what, async () => {
    const { etag } = await api.one(path);
    await api.call('DELETE', path, { etag });
    ctx.refresh();
  });
}

/** PATCHes changes into the item at path (read first for its ETag), then refreshes. */
export async function patchItem(path, changes, ctx) {
  await act(async () => {
    const { etag } = await api.one(path);
    await api.call('PATCH', path, { body: changes, etag });
    ctx.refresh();
  }, ctx.refresh);
}

/**
 * The edit form of the item at path: title(item) heads it, fields(item)
 * are its controls, body(form, item) the PATCH body (it may throw an error
 * with param, shown by that field); saved, or cancelled, back to back.
 */
export async function editItem(root, ctx, { path, back, label, submit, title, fields, body }) {
  const { item, etag } = await api.one(path);
  root.append(section(title(item), form(label, fields(item), {
    submit,
    onReload: () => ctx.refresh(),
    onSubmit: async (fm) => {
      await api.call('PATCH', path, { body: body(fm, item), etag });
      ctx.navigate(back);
    },
    extra: [button('Cancel', () => ctx.navigate(back))],
  })));
  return item;
}
