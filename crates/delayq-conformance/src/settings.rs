//! The settings store ([`delayq::SettingsStore`]) and its change notices.
//!
//! Each case takes a [`Harness`] on a fresh backend and panics when the backend breaks the
//! rule.

use crate::Harness;

/// The settings store: put replaces, list is by key inside one namespace, delete says
/// whether the key was there; values are bytes.
pub async fn settings_put_list_delete(h: &Harness) {
    let s = h.queue.settings();
    // Every change is announced to the readers of its namespace, and only of it.
    let mut push = h.queue.context().settings.subscribe("push");
    let schedules = h.queue.context().settings.subscribe("schedules");
    s.put("push", "z", b"note".to_vec()).await.unwrap();
    assert!(push.has_changed().unwrap(), "a put is announced");
    assert!(!schedules.has_changed().unwrap(), "to its namespace only");
    push.mark_unchanged();
    assert!(!s.delete("push", "missing").await.unwrap());
    assert!(
        !push.has_changed().unwrap(),
        "a delete that removed nothing is not"
    );
    assert!(s.delete("push", "z").await.unwrap());
    assert!(push.has_changed().unwrap(), "a delete is announced");
    assert!(!schedules.has_changed().unwrap());
    assert!(s.list("push").await.unwrap().is_empty());
    s.put("push", "b", b"second".to_vec()).await.unwrap();
    s.put("push", "a", vec![0, 1, 0xff]).await.unwrap();
    s.put("schedules", "a", b"other".to_vec()).await.unwrap();
    s.put("push", "b", b"replaced".to_vec()).await.unwrap();
    assert_eq!(
        s.list("push").await.unwrap(),
        [
            ("a".to_string(), vec![0, 1, 0xff]),
            ("b".to_string(), b"replaced".to_vec())
        ]
    );
    assert!(s.delete("push", "a").await.unwrap());
    assert!(!s.delete("push", "a").await.unwrap());
    assert_eq!(
        s.list("push").await.unwrap(),
        [("b".to_string(), b"replaced".to_vec())]
    );
    assert_eq!(
        s.list("schedules").await.unwrap(),
        [("a".to_string(), b"other".to_vec())]
    );
    // Settings are not tasks.
    assert!(h.queue.topics().await.unwrap().is_empty());
}
