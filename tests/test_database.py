import psycopg


def test_database_is_real_postgresql(database_url):
    with psycopg.connect(database_url) as conn:
        version = conn.execute("show server_version_num").fetchone()[0]
    assert int(version) >= 150000
