"""Reading a table: snapshot and incremental reads, a merge-on-read slice's base file merged with its logs, the
values a change event did not carry, and a file-system view kept current from the timeline. Built on the format
and the storage seam."""
