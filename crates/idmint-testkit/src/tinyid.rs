//! Didi Tinyid's own schema and sample data, for the tests that take over a
//! Tinyid deployment (the segment store's and the server's), and a
//! simulated Tinyid server's lease, for the tests that run one beside idmint.

use sqlx::mysql::MySqlPool;

/// Tinyid's DDL and sample rows, verbatim from didi/tinyid
/// `tinyid-server/db.sql` (one statement per element).
pub const DB_SQL: [&str; 6] = [
    "CREATE TABLE `tiny_id_info` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT '自增主键',
  `biz_type` varchar(63) NOT NULL DEFAULT '' COMMENT '业务类型，唯一',
  `begin_id` bigint(20) NOT NULL DEFAULT '0' COMMENT '开始id，仅记录初始值，无其他含义。初始化时begin_id和max_id应相同',
  `max_id` bigint(20) NOT NULL DEFAULT '0' COMMENT '当前最大id',
  `step` int(11) DEFAULT '0' COMMENT '步长',
  `delta` int(11) NOT NULL DEFAULT '1' COMMENT '每次id增量',
  `remainder` int(11) NOT NULL DEFAULT '0' COMMENT '余数',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '创建时间',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '更新时间',
  `version` bigint(20) NOT NULL DEFAULT '0' COMMENT '版本号',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uniq_biz_type` (`biz_type`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8 COMMENT 'id信息表'",
    "CREATE TABLE `tiny_id_token` (
  `id` int(11) unsigned NOT NULL AUTO_INCREMENT COMMENT '自增id',
  `token` varchar(255) NOT NULL DEFAULT '' COMMENT 'token',
  `biz_type` varchar(63) NOT NULL DEFAULT '' COMMENT '此token可访问的业务类型标识',
  `remark` varchar(255) NOT NULL DEFAULT '' COMMENT '备注',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '创建时间',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '更新时间',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8 COMMENT 'token信息表'",
    "INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)
VALUES
	(1, 'test', 1, 1, 100000, 1, 0, '2018-07-21 23:52:58', '2018-07-22 23:19:27', 1)",
    "INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)
VALUES
	(2, 'test_odd', 1, 1, 100000, 2, 1, '2018-07-21 23:52:58', '2018-07-23 00:39:24', 3)",
    "INSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)
VALUES
	(1, '0f673adf80504e2eaa552f5d791b644c', 'test', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48')",
    "INSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)
VALUES
	(2, '0f673adf80504e2eaa552f5d791b644c', 'test_odd', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48')",
];

/// The row a Tinyid server reads before taking a segment (the columns of
/// `TinyIdInfoDAOImpl.queryByBizType` it uses); binds `biz_type`.
pub const QUERY_BY_BIZ_TYPE: &str = "select id, max_id, step, delta, remainder, version \
     from tiny_id_info where biz_type = ?";

/// Tinyid's `TinyIdInfoDAOImpl.updateMaxId`, verbatim: the optimistic lock.
/// Binds the new max_id, id, old max_id, version, biz_type.
pub const UPDATE_MAX_ID: &str = "update tiny_id_info set max_id= ?, update_time=now(), \
     version=version+1 where id=? and max_id=? and version=? and biz_type=?";

/// A segment as a Tinyid server takes it: the numbers `(old_max, new_max]`
/// with `id % delta == remainder`.
#[derive(Debug, Clone, Copy)]
pub struct TinyidLease {
    /// The row's `max_id` before the lease.
    pub old_max: i64,
    /// The row's `max_id` after it.
    pub new_max: i64,
    /// The row's `delta`.
    pub delta: i64,
    /// The row's `remainder`.
    pub remainder: i64,
}

/// Tinyid's `DbSegmentIdServiceImpl.getNextSegmentId`, re-implemented:
/// `queryByBizType`, `newMaxId = max_id + step`, `updateMaxId` (the
/// optimistic lock on `id`, `max_id`, `version`), again on a lost race. Each
/// statement commits on its own. (Tinyid wraps the loop in one
/// `@Transactional`; under InnoDB's REPEATABLE READ its re-reads then see the
/// first read's snapshot, so a lost race there is lost on every retry. That
/// only makes Tinyid fail more, never overlap; this loop retries for real.)
pub async fn next_segment(pool: &MySqlPool, biz_type: &str) -> (TinyidLease, u32) {
    for lost in 0.. {
        let (id, max_id, step, delta, remainder, version): (u64, i64, i32, i32, i32, i64) =
            sqlx::query_as(QUERY_BY_BIZ_TYPE)
                .bind(biz_type)
                .fetch_one(pool)
                .await
                .unwrap();
        let new_max = max_id + i64::from(step);
        let updated = sqlx::query(UPDATE_MAX_ID)
            .bind(new_max)
            .bind(id)
            .bind(max_id)
            .bind(version)
            .bind(biz_type)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected();
        if updated == 1 {
            let lease = TinyidLease {
                old_max: max_id,
                new_max,
                delta: i64::from(delta),
                remainder: i64::from(remainder),
            };
            return (lease, lost);
        }
    }
    unreachable!()
}
