#[test]
fn zz_dump_schema() {
    let Ok(out) = std::env::var("SCHEMA_DUMP") else {
        return;
    };
    let out = std::path::PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    for from in 0..super::schema::MIGRATIONS.len() {
        let path = out.join(format!("from{from}.db"));
        let _ = std::fs::remove_file(&path);
        if from > 0 {
            let c = rusqlite::Connection::open(&path).unwrap();
            for m in &super::schema::MIGRATIONS[..from] {
                c.execute_batch(m.sql).unwrap();
            }
            c.execute_batch(&format!(
                "INSERT INTO meta VALUES ('schema_version', '{from}'); PRAGMA user_version = {from};"
            ))
            .unwrap();
        }
        let s = super::Store::open(&path).unwrap();
        drop(s);
    }
}
