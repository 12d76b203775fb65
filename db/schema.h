// The schema of the detfuse results store, as data: the DDL of version 1 and
// the forward migrations to every later version. A new file is created by
// running the v1 DDL and then every migration, so the migration path is
// exercised by every fresh database, not only by old files.
//
// Policy (db/README.md): a released schema is never edited; a change is a new
// migration appended here with kSchemaVersion (db/store.h) bumped. Migrations
// run in one transaction when a file older than the build is opened read-write.
#pragma once

#include <vector>

namespace detfuse::db::schema {

// DDL creating schema version 1 (without the application_id / user_version
// pragmas, which the store sets). Tests use it to fabricate a v1 file.
const char* v1_ddl();

struct Migration {
  int to_version;   // the file is at to_version - 1 before, to_version after
  const char* sql;  // statements run in the migration transaction
  const char* what; // one line for the README / error messages
};

// Migrations in order: to_version = 2, 3, ..., kSchemaVersion.
const std::vector<Migration>& migrations();

}  // namespace detfuse::db::schema
