//! etcd: a key prefix watched from a revision, and self-registration under a lease (etcd-client).
