"""Every Delta read and write spark-flow makes itself: tables opened, read, merged and
appended to, a queue's commit infos and change data, a queue's existence, reaching storage.
The only package that imports ``deltalake``; the layers above hold none of its objects."""
