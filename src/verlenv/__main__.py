from verlenv.cli import main

raise SystemExit(main())
