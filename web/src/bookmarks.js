// Named bookmarks of the whole view: each is the URL fragment of a view (every setting of every
// tab, the selected row and the camera: what a shared link carries), kept in the browser's
// localStorage under "embedscope-bookmarks", listed in a dialog as links (each a shareable URL),
// exported as a JSON file and imported from one. A bookmark of the same name is replaced.
// File format: {"embedscope_bookmarks": 1, "bookmarks": [{"name", "view", "saved"}]}, view being
// the fragment without '#'.
const KEY = 'embedscope-bookmarks';

export function readBookmarks(storage) {
    try {
        const list = JSON.parse(storage.getItem(KEY) || '[]');
        return Array.isArray(list) ? list.filter(valid) : [];
    } catch (e) {
        return [];
    }
}

function valid(b) {
    return b && typeof b.name === 'string' && b.name.trim() !== '' && typeof b.view === 'string';
}

function write(storage, list) {
    storage.setItem(KEY, JSON.stringify(list));
}

// Add or replace (by name) bookmarks; returns the list.
export function addBookmarks(storage, items) {
    const list = readBookmarks(storage);
    for (const b of items.filter(valid)) {
        const entry = { name: b.name.trim().slice(0, 200), view: b.view.replace(/^#/, ''), saved: b.saved || new Date().toISOString() };
        const at = list.findIndex((x) => x.name === entry.name);
        if (at >= 0) list[at] = entry; else list.push(entry);
    }
    write(storage, list);
    return list;
}

export function removeBookmark(storage, name) {
    write(storage, readBookmarks(storage).filter((b) => b.name !== name));
}

export function exportBookmarks(storage) {
    return JSON.stringify({ embedscope_bookmarks: 1, bookmarks: readBookmarks(storage) }, null, 1);
}

// The bookmarks of an exported file (or a bare list of them); throws on anything else.
export function parseBookmarks(text) {
    const doc = JSON.parse(text);
    const list = Array.isArray(doc) ? doc : doc && doc.bookmarks;
    if (!Array.isArray(list)) throw new Error('not an embedscope bookmarks file (no "bookmarks" list)');
    const good = list.filter(valid);
    if (good.length !== list.length) throw new Error((list.length - good.length) + ' of ' + list.length + ' entries lack a name or a view');
    return good;
}
