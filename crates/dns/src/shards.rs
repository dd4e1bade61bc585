//! A hash map whose copies share what they did not change: the keys are spread over 64
//! shards, each behind an `Arc`, so copying the map copies 64 pointers and a change copies
//! one shard. The cluster view is one of these per change, while queries still read the last
//! one; copying a whole map of 10,000 Services per change is the cost this avoids.

use std::borrow::Borrow;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use hashbrown::HashMap;

const SHARDS: usize = 64;

/// The map; empty, it holds no shard at all (a namespace with one Service costs one shard).
#[derive(Debug)]
pub struct Shards<K, V> {
    shards: Vec<Option<Arc<HashMap<K, V>>>>,
}

impl<K, V> Default for Shards<K, V> {
    fn default() -> Self {
        Shards { shards: Vec::new() }
    }
}

impl<K, V> Clone for Shards<K, V> {
    fn clone(&self) -> Self {
        Shards {
            shards: self.shards.clone(),
        }
    }
}

/// The shard of `key`: a fixed hash (not seeded per map), so every copy agrees, and equal for
/// a `String` and its `str`.
fn shard_of<Q: Hash + ?Sized>(key: &Q) -> usize {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % SHARDS as u64) as usize
}

impl<K: Hash + Eq + Clone, V: Clone> Shards<K, V> {
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards.get(shard_of(key))?.as_ref()?.get(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Copies the key's shard if another map shares it.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if self.shards.is_empty() {
            self.shards.resize(SHARDS, None);
        }
        let shard = self.shards[shard_of(&key)].get_or_insert_with(Default::default);
        Arc::make_mut(shard).insert(key, value)
    }

    /// The key's value, made with `Default` if absent; copies the key's shard if shared.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        if self.shards.is_empty() {
            self.shards.resize(SHARDS, None);
        }
        let shard = self.shards[shard_of(&key)].get_or_insert_with(Default::default);
        Arc::make_mut(shard).entry(key).or_default()
    }

    /// Copies the key's shard if another map shares it and the key is there.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shards.get_mut(shard_of(key))?.as_mut()?;
        if !shard.contains_key(key) {
            return None;
        }
        Arc::make_mut(shard).get_mut(key)
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let slot = self.shards.get_mut(shard_of(key))?;
        let shard = slot.as_mut()?;
        if !shard.contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(shard).remove(key);
        if shard.is_empty() {
            *slot = None;
        }
        removed
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flatten().flat_map(|s| s.iter())
    }

    pub fn len(&self) -> usize {
        self.shards.iter().flatten().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_what_it_had_when_the_original_changes() {
        let mut a: Shards<String, u32> = Shards::default();
        for i in 0..500 {
            a.insert(format!("k{i}"), i);
        }
        let b = a.clone();
        a.insert("k1".into(), 99);
        a.remove("k2");
        *a.get_mut("k3").unwrap() = 7;
        assert_eq!(
            (a.get("k1"), a.get("k2"), a.get("k3")),
            (Some(&99), None, Some(&7))
        );
        assert_eq!(
            (b.get("k1"), b.get("k2"), b.get("k3")),
            (Some(&1), Some(&2), Some(&3))
        );
        assert_eq!((a.len(), b.len()), (499, 500));
    }
}
